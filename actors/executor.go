package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	gojson "github.com/goccy/go-json"

	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/par"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
	"github.com/wts-project/wts/persistence"
)

// job is one operation for the executor, with what it needs to rebuild the
// run's trainer if it does not hold it at the right state.
type job struct {
	RunID       string
	Epoch       uint64
	OpID        string
	SeqID       int64
	Kind        string
	Payload     json.RawMessage
	BaseModel   string
	LoRA        persistence.LoRA
	StateSeq    int64 // the trainer must reflect the run's operations up to here
	SnapshotSeq int64 // the newest snapshot the run has recorded
	// FromCheckpoint: the run started from a checkpoint, whose state is in
	// its initial folder, not from a fresh adapter.
	FromCheckpoint bool
	// WeightVersion is the run's latest saved weight version, and
	// WeightsSeq the state it was saved at.
	WeightVersion int64
	WeightsSeq    int64

	parsed payload.Parsed // Payload parsed, when the grain had it (see Submission)
}

// executor runs the engine for every run on this node. Jobs run one at a
// time on its worker (the engine already uses every core); its mailbox stays
// free meanwhile, so cancels and releases never wait behind a long job.
type executor struct {
	sys     *System
	jobs    *inbox[func()]
	mu      sync.Mutex
	cancels map[string]context.CancelFunc // "run/seq" → cancel, from submit until the job ends
	drained chan struct{}

	// Owned by the worker goroutine.
	trainers map[string]*trainerState
	arena    *transformer.Arena[float32] // every trainer's buffers (see Trainer.UseArena)
}

// trainerState is a run's live trainer and how far it has got.
type trainerState struct {
	tr           *train.Trainer
	baseModel    string
	stateSeq     int64     // the last mutating operation applied
	snapshotSeq  int64     // the newest snapshot written
	lastSnapshot time.Time // compute since then decides the next snapshot
}

// progressEvery spaces progress reports of one operation.
const progressEvery = 250 * time.Millisecond

func newExecutor(s *System) *executor {
	e := &executor{
		sys: s, jobs: newInbox[func()](1024), cancels: map[string]context.CancelFunc{}, drained: make(chan struct{}),
		trainers: map[string]*trainerState{}, arena: transformer.NewArena[float32](),
	}
	go e.work()
	return e
}

// jobRef names one run's operation to cancel, or (SeqID 0) the run whose
// trainer to release.
type jobRef struct {
	RunID string
	SeqID int64
}

// Receive takes the grains' commands.
func (e *executor) Receive(ctx actor.Context) {
	method, in, _, ok := request(ctx.Message())
	if !ok {
		return
	}
	var err error
	switch method {
	case "exec.job":
		var j *job
		if j, err = decode[job](in); err == nil {
			e.submit(j)
		}
	case "exec.cancel":
		var r *jobRef
		if r, err = decode[jobRef](in); err == nil {
			e.cancel(r.RunID, r.SeqID)
		}
	case "exec.release":
		var r *jobRef
		if r, err = decode[jobRef](in); err == nil {
			e.release(r.RunID)
		}
	default:
		err = fmt.Errorf("unknown method %q", method)
	}
	if err != nil {
		e.sys.log.Error("executor command", "method", method, "err", err)
	}
}

func (e *executor) work() {
	defer close(e.drained)
	par.EngineThread()
	for fn := range e.jobs.c {
		fn()
		// With a backlog the worker ran job after job on one processor, and
		// Go preempts a running goroutine only after 10 ms: the request
		// goroutines queued behind it waited that long. Yielding after each
		// job lets them go first (submit p99 at 64 clients ~10% lower).
		// Where the engine has threads of its own at a lower priority
		// (par.Configure), the OS runs the requests first instead.
		par.Yield()
	}
}

func jobKey(runID string, seq int64) string { return runID + "/" + strconv.FormatInt(seq, 10) }

// submit queues a job; its cancel is registered at once, so a cancel before
// it starts stops it too.
func (e *executor) submit(j *job) {
	ctx, cancel := context.WithCancel(context.Background())
	e.mu.Lock()
	e.cancels[jobKey(j.RunID, j.SeqID)] = cancel
	e.mu.Unlock()
	if !e.jobs.put(func() { e.run(ctx, j) }) {
		// Stopping: the operation stays executing on disk, and the next
		// start settles it as interrupted, as for any stop mid-work.
		e.mu.Lock()
		delete(e.cancels, jobKey(j.RunID, j.SeqID))
		e.mu.Unlock()
		cancel()
		e.sys.log.Warn("job refused: the node is stopping", "run", j.RunID, "seq_id", j.SeqID)
	}
}

func (e *executor) cancel(runID string, seq int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.cancels[jobKey(runID, seq)]; c != nil {
		c()
	}
}

// release drops a run's trainer once the jobs queued before it are done.
func (e *executor) release(runID string) {
	e.jobs.put(func() { delete(e.trainers, runID) })
}

// drain stops taking jobs and waits for the queued ones; when ctx ends first,
// the rest are cancelled (and report so) before it returns.
func (e *executor) drain(ctx context.Context) {
	e.jobs.close()
	select {
	case <-e.drained:
		return
	case <-ctx.Done():
	}
	e.mu.Lock()
	for _, c := range e.cancels {
		c()
	}
	e.mu.Unlock()
	<-e.drained
}

func (e *executor) run(ctx context.Context, j *job) {
	start := time.Now()
	d := e.execute(ctx, j)
	took := time.Since(start)
	d.Epoch, d.SeqID, d.DurationMS = j.Epoch, j.SeqID, float64(took.Microseconds())/1000
	e.sys.cfg.Metrics.Executed(j.Kind, d.Status, took)
	e.mu.Lock()
	delete(e.cancels, jobKey(j.RunID, j.SeqID))
	e.mu.Unlock()
	e.sys.tell(runKind, j.RunID, "run.exec_done", d)
}

// execute runs one operation and says how it ended.
func (e *executor) execute(ctx context.Context, j *job) *done {
	if ctx.Err() != nil {
		return &done{Status: OpCancelled, Code: CodeCancelled, Message: "cancelled before it started"}
	}
	ts, err := e.trainer(ctx, j)
	if err != nil {
		return failure(ctx, err)
	}
	last := time.Now() // the first report after progressEvery: short work writes none
	ctx = train.WithProgress(ctx, func(doneTokens, total int) {
		if now := time.Now(); now.Sub(last) >= progressEvery {
			last = now
			p, _ := json.Marshal(map[string]int{"tokens_done": doneTokens, "tokens_total": total})
			e.sys.tell(runKind, j.RunID, "run.exec_progress", progressUpdate{Epoch: j.Epoch, SeqID: j.SeqID, Progress: p})
		}
	})
	out, err := e.apply(ctx, ts, j, j.OpID, j.Kind, j.Payload, j.parsed)
	if err != nil {
		return failure(ctx, err)
	}
	d := &done{Status: OpSucceeded, Metrics: out.metrics, Tokens: out.tokens, Steps: int64(ts.tr.Steps()),
		Checkpoint: out.checkpoint, Artifact: out.artifact, WeightVersion: out.weightVersion, Handoff: out.handoff}
	// go-json: encoding/json's reflection took 2% of the service's CPU at
	// 64 clients; the replies around the result are go-json's already.
	if d.Result, err = gojson.Marshal(out.result); err != nil {
		return failure(ctx, fmt.Errorf("encode result: %w", err))
	}
	if payload.Mutates(j.Kind) {
		ts.stateSeq = j.SeqID
	}
	// A snapshot follows an optim_step now and then, and every load_state,
	// so that rebuilding the run never needs the loaded checkpoint's files
	// (which retiring their run removes).
	if j.Kind == payload.OptimStep && time.Since(ts.lastSnapshot) >= e.sys.cfg.SnapshotEvery || j.Kind == payload.LoadState {
		if err := e.snapshot(j.RunID, ts); err != nil {
			e.sys.log.Error("trainer snapshot", "run", j.RunID, "seq", j.SeqID, "err", err)
		} else {
			d.SnapshotSeq = ts.snapshotSeq
		}
	}
	return d
}

// failure classifies an error: a cancel, the caller's input (its engine
// code), or an internal fault.
func failure(ctx context.Context, err error) *done {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return &done{Status: OpCancelled, Code: CodeCancelled, Message: "cancelled while executing"}
	}
	if code := kerr.Code(err); code != "" {
		return &done{Status: OpFailed, Code: code, Message: err.Error()}
	}
	return &done{Status: OpFailed, Code: CodeInternal, Message: err.Error()}
}

// forwardResult is the result of forward and forward_backward.
type forwardResult struct {
	LossFnOutputs []lossOutput       `json:"loss_fn_outputs"`
	Metrics       map[string]float64 `json:"metrics"`
}

type lossOutput struct {
	Logprobs []float64 `json:"logprobs"`
	Loss     float64   `json:"loss"`
}

// optimResult is the result of optim_step.
type optimResult struct {
	Metrics map[string]float64 `json:"metrics"`
}

// applied is what one operation produced: its result object, the step
// record's values for operations that leave one, the token positions the
// model processed, and the checkpoint or artifact it wrote.
type applied struct {
	result     any
	metrics    map[string]float64
	tokens     int64
	checkpoint *persistence.Checkpoint
	artifact   *persistence.Artifact
	// weightVersion is a weight version saved for the sampler (or, with
	// handoff, the version a run-scoped sample is to run at); handoff: the
	// operation goes on in the run's sampler.
	weightVersion int64
	handoff       bool
}

// apply runs operation opID of job j's run on the run's trainer (load_state
// replaces it). p is raw parsed, or nil to parse it here.
func (e *executor) apply(ctx context.Context, ts *trainerState, j *job, opID, kind string, raw json.RawMessage, p payload.Parsed) (*applied, error) {
	runID := j.RunID
	if p == nil {
		var err error
		if p, err = payload.Parse(kind, raw); err != nil {
			return nil, err
		}
	}
	tr := ts.tr
	tr.UseArena(e.arena)
	switch p := p.(type) {
	case *payload.Batch:
		run := tr.Forward
		if kind == payload.ForwardBackward {
			run = tr.ForwardBackward
		}
		out, err := run(ctx, p.Datums(), p.LossFn, p.LossFnConfig)
		if err != nil {
			return nil, err
		}
		tokens := int64(out.Metrics["tokens:sum"])
		res := forwardResult{LossFnOutputs: make([]lossOutput, len(out.Losses)), Metrics: out.Metrics}
		for i := range out.Losses {
			res.LossFnOutputs[i] = lossOutput{Logprobs: out.Logprobs[i], Loss: out.Losses[i]}
		}
		if kind == payload.Forward {
			return &applied{result: res, tokens: tokens}, nil
		}
		values := make(map[string]float64, len(out.Metrics)+1)
		for k, v := range out.Metrics {
			values[k] = v
		}
		if n := out.Metrics["tokens:sum"]; n > 0 {
			values["loss:mean"] = out.Metrics["loss:sum"] / n
		}
		return &applied{result: res, metrics: values, tokens: tokens}, nil
	case *payload.Step:
		m, err := tr.OptimStep(p.Params())
		if err != nil {
			return nil, err
		}
		clipped := 0.0
		if m.Clipped {
			clipped = 1
		}
		values := map[string]float64{"grad_norm": m.GradNorm, "learning_rate": m.LR, "step": float64(m.Step), "clipped": clipped}
		return &applied{result: optimResult{Metrics: values}, metrics: values}, nil
	case *payload.Save:
		return e.saveState(ts, runID, opID, p)
	case *payload.Load:
		return e.loadState(ts, p)
	case *payload.Export:
		return e.exportLoRA(ts, runID, opID, p)
	case *payload.SaveWeights:
		v, err := e.saveWeights(ts, j)
		return &applied{result: weightsResult{v, samplerID(runID)}, weightVersion: v}, err
	case *payload.SamplePayload:
		// A run-scoped sample: the run's current weights go to its sampler
		// (a new version only if the trainer moved since the last one), which
		// samples and reports to the run.
		v := j.WeightVersion
		if v == 0 || j.WeightsSeq != j.StateSeq {
			var err error
			if v, err = e.saveWeights(ts, j); err != nil {
				return nil, err
			}
		}
		return &applied{weightVersion: v, handoff: true}, nil
	}
	return nil, fmt.Errorf("executor: no engine primitive for %s", kind)
}

// weightsResult is the result of save_weights_for_sampler.
type weightsResult struct {
	WeightVersion int64  `json:"weight_version"`
	SamplerID     string `json:"sampler_id"`
}

// saveWeights writes the run's adapter as its next weight version.
func (e *executor) saveWeights(ts *trainerState, j *job) (int64, error) {
	v := j.WeightVersion + 1
	err := persistence.WriteDir(e.sys.volume.WeightsDir(j.RunID, v), func(tmp string) error {
		return lora.SavePEFT(tmp, ts.tr.Adapter(), ts.baseModel)
	})
	if err != nil {
		return 0, fmt.Errorf("save weight version %d: %w", v, err)
	}
	return v, nil
}

// trainer returns the run's trainer at the job's state. When this node does
// not hold it there (a restart, or another node ran the run), it rebuilds it:
// the newest snapshot, then every succeeded mutating operation after it,
// replayed in order from the store. The engine is deterministic, so the
// replayed state is the one the operations produced; each replayed loss is
// compared with the recorded one to show it.
func (e *executor) trainer(ctx context.Context, j *job) (*trainerState, error) {
	if ts := e.trainers[j.RunID]; ts != nil && ts.stateSeq == j.StateSeq {
		return ts, nil
	}
	delete(e.trainers, j.RunID)
	m, err := e.sys.model(j.BaseModel)
	if err != nil {
		return nil, err
	}
	ts := &trainerState{baseModel: j.BaseModel, lastSnapshot: time.Now(), snapshotSeq: j.SnapshotSeq}
	switch {
	case j.SnapshotSeq > 0:
		if ts.tr, err = train.LoadState(e.sys.volume.SnapshotDir(j.RunID, j.SnapshotSeq), m); err != nil {
			return nil, fmt.Errorf("load snapshot %d of %s: %w", j.SnapshotSeq, j.RunID, err)
		}
	case j.FromCheckpoint:
		if ts.tr, err = train.LoadState(e.sys.volume.InitialDir(j.RunID), m); err != nil {
			return nil, fmt.Errorf("load the initial state of %s: %w", j.RunID, err)
		}
	default:
		ad, err := lora.New(m.Cfg(), loraConfig(&j.LoRA))
		if err != nil {
			return nil, err
		}
		ts.tr = train.NewTrainer(m, ad)
	}
	var replay []*persistence.Operation
	err = e.sys.store.View(func(tx *persistence.Tx) error {
		return tx.Scan(persistence.Ops, []byte(j.RunID), persistence.SeqKey(j.RunID, j.SnapshotSeq), func(_, raw []byte) (bool, error) {
			op := new(persistence.Operation)
			if err := persistence.Decode(raw, op); err != nil {
				return false, err
			}
			if op.SeqID > j.StateSeq {
				return false, nil
			}
			if op.Status == OpSucceeded && payload.Mutates(op.Kind) {
				replay = append(replay, op)
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read operations to replay: %w", err)
	}
	for _, op := range replay {
		out, err := e.apply(ctx, ts, j, op.ID, op.Kind, op.Payload, nil)
		if err != nil {
			return nil, fmt.Errorf("replay %s seq %d of %s: %w", op.Kind, op.SeqID, j.RunID, err)
		}
		e.checkReplay(op, out.result)
		ts.stateSeq = op.SeqID
	}
	e.sys.log.Info("trainer rebuilt", "run", j.RunID, "snapshot_seq", j.SnapshotSeq, "replayed", len(replay), "state_seq", j.StateSeq)
	e.trainers[j.RunID] = ts
	return ts, nil
}

// checkReplay logs a replayed forward_backward whose loss differs from the
// recorded one: the rebuilt trainer would then not be the one callers saw.
func (e *executor) checkReplay(op *persistence.Operation, res any) {
	fr, ok := res.(forwardResult)
	if !ok {
		return
	}
	var recorded forwardResult
	if err := json.Unmarshal(op.Result, &recorded); err != nil {
		return
	}
	if a, b := fr.Metrics["loss:sum"], recorded.Metrics["loss:sum"]; a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
		e.sys.log.Warn("replayed loss differs from the recorded one", "run", op.RunID, "seq", op.SeqID, "replayed", a, "recorded", b)
	}
}

// snapshot writes the trainer (after an optim_step, so no gradient is
// pending) to the run volume. It keeps the previous snapshot until a later
// one replaces it: the run record may still name it if the node dies before
// the grain records this one.
func (e *executor) snapshot(runID string, ts *trainerState) error {
	dir := e.sys.volume.SnapshotDir(runID, ts.stateSeq)
	if err := persistence.WriteDir(dir, func(tmp string) error { return ts.tr.SaveState(tmp, ts.baseModel) }); err != nil {
		return err
	}
	if ts.snapshotSeq > 0 {
		entries, _ := os.ReadDir(filepath.Dir(dir))
		for _, en := range entries {
			if seq, err := strconv.ParseInt(en.Name(), 10, 64); err == nil && seq < ts.snapshotSeq {
				os.RemoveAll(filepath.Join(filepath.Dir(dir), en.Name()))
			}
		}
	}
	ts.snapshotSeq, ts.lastSnapshot = ts.stateSeq, time.Now()
	return nil
}
