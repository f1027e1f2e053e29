package executor

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

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/par"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/persistence"
)

// Job is one operation for the executor, with what it needs to rebuild the
// run's trainer if it does not hold it at the right state.
type Job struct {
	RunID       string
	Tenant      persistence.Tenant // whose turn it is (the executor takes turns between organizations)
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
	// First: the run activation's first job, which may be the one a crash
	// cut short (see markStarted).
	First bool
	// SamplerID is the run's sampler (its weight versions are the
	// sampler's).
	SamplerID string
	// WeightVersion is the run's latest saved weight version, and
	// WeightsSeq the state it was saved at.
	WeightVersion int64
	WeightsSeq    int64
	// Pooled: the run's provider shares passes (providers.SharesPasses):
	// its forward and forward_backward may run in one pass with other
	// pooled runs' (sharedPass).
	Pooled bool

	Parsed payload.Parsed `msgpack:"-"` // Payload parsed, when the grain had it (it is not encoded)
}

// Trainer runs the engine for every run on this node, one slice of work
// at a time on its worker (the engine already uses every core): a slice is
// one micro-batch of a forward or forward_backward (train.Pass), or a whole
// other operation, or loading a trainer's base state or replaying one
// operation on it (trainer). Between slices it takes turns
// between organizations (fairQueue), so a tenant's small forward waits for
// at most one slice of another's large batch, never for the batch or the
// backlog behind it. Its mailbox stays free meanwhile, so cancels and
// releases never wait behind a long job.
//
// An operation is pending on disk until its work starts: the executor then
// tells the run (run.exec_started, see markStarted), which marks it
// executing. So a restart finds executing only what was really on the
// device.
type Trainer struct {
	sys     *node
	mu      sync.Mutex
	wake    *sync.Cond
	ready   fairQueue[*task]
	tasks   map[string]*task // "run/seq" → the task, from submit until it is reported
	fence   epochFence       // by run: jobs, cancels and releases of older activations are refused
	release []string         // runs whose trainer to drop, in the worker
	trim    bool             // evict every trainer not in use (the samplers need memory)
	// stopping: no task starts any more (those not started stay pending on
	// disk); the started ones run on until they end or drain's deadline.
	stopping bool
	drained  chan struct{}

	// Owned by the worker goroutine.
	trainers map[string]*trainerState
}

// task is one operation in the executor: its job, its cancel, and how far
// it has got.
type task struct {
	j       *Job
	org     string
	ctx     context.Context
	cancel  context.CancelCauseFunc
	started time.Time   // zero until its first slice
	mark    *time.Timer // tells the run it started, unless it ends first
	ts      *trainerState
	rb      *rebuild    // its run's trainer being rebuilt, before ts
	pass    train.Batch // a forward or forward_backward in progress
	chore   *chore      // set for work that is not an operation
}

// chore is tensor-heavy work that is not an operation of a run (building an
// artifact's merged model): it takes its organization's turn like any
// operation, in one slice, and its caller waits for it (Chore). Its job
// names it (RunID "chore/..."), for the task table and the fence.
type chore struct {
	run  func(e *Trainer) error
	done chan error // buffered: the outcome, once
}

// Chore runs fn on the executor in organization org's turn and returns
// its outcome; key names it (one at a time per key). It waits while fn
// finds no memory (errNoRoom), and fails with unavailable when the node
// stops first.
func (e *Trainer) Chore(org, key string, fn func(e *Trainer) error) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	c := &chore{run: fn, done: make(chan error, 1)}
	t := &task{j: &Job{RunID: "chore/" + key, Tenant: persistence.Tenant{Org: org}, Kind: "chore"}, org: org, ctx: ctx, cancel: cancel, chore: c}
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		return &grain.Error{Code: grain.CodeUnavailable, Message: "the node is stopping"}
	}
	e.tasks[jobKey(t.j.RunID, 0)] = t
	e.ready.push(org, t)
	e.mu.Unlock()
	e.wake.Signal()
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done(): // dropped unstarted by the node's stop
		return &grain.Error{Code: grain.CodeUnavailable, Message: "the node stopped before the work started"}
	}
}

// WithMemory is Chore for work that holds need bytes of the node's budget
// while it runs (evicting idle trainers for them, or waiting).
func (e *Trainer) WithMemory(org, key string, need int64, fn func() error) error {
	return e.Chore(org, key, func(e *Trainer) error {
		if err := e.room(need, ""); err != nil {
			return err
		}
		defer e.sys.mem.give(need)
		return fn()
	})
}

// runChore runs a chore's slice: again later when it found no memory.
func (e *Trainer) runChore(t *task) {
	err := t.ctx.Err()
	if err == nil {
		err = grain.Guard(e.sys.env.Log, "executor chore "+t.j.RunID, func() error { return t.chore.run(e) })
	}
	if errors.Is(err, errNoRoom) && t.ctx.Err() == nil {
		if e.backInLine(t) {
			time.Sleep(roomWait)
		}
		return
	}
	e.mu.Lock()
	e.forget(t)
	e.mu.Unlock()
	t.chore.done <- err
}

// errStopping cancels a started operation at drain's deadline: it goes
// back to pending and runs again after the next start.
var errStopping = errors.New("the node is stopping")

// trainerState is a run's live trainer and how far it has got.
type trainerState struct {
	tr           train.Learner
	engine       train.Engine // the base model's, on this executor's device
	baseModel    string
	epoch        uint64    // the run activation it was built for
	stateSeq     int64     // the last mutating operation applied
	snapshotSeq  int64     // the newest snapshot written
	lastSnapshot time.Time // compute since then decides the next snapshot
	lastUsed     time.Time // the least recently used is evicted first
	bytes        int64     // its share of the memory budget
}

// errFenced cancels a task that a newer activation of its run replaced.
var errFenced = errors.New("fenced: a newer activation of the run holds it")

// FaultHook runs before every slice; tests make it panic to show that a
// fault in one operation fails that operation alone.
var FaultHook = func(*Job) {}

// roomWait is how long an operation alone in the executor waits for
// memory before it tries again.
const roomWait = 20 * time.Millisecond

// progressEvery spaces progress reports of one operation.
const progressEvery = 250 * time.Millisecond

func newTrainer(s *node) *Trainer {
	e := &Trainer{sys: s, tasks: map[string]*task{}, fence: epochFence{}, drained: make(chan struct{}),
		trainers: map[string]*trainerState{}}
	e.wake = sync.NewCond(&e.mu)
	go e.work()
	return e
}

// JobRef names one run's operation to cancel, or (SeqID 0) the run whose
// trainer to release, from the run activation Epoch.
type JobRef struct {
	RunID string
	SeqID int64
	Epoch uint64
}

// Receive takes the grains' commands.
func (e *Trainer) Receive(ctx actor.Context) {
	method, in, _, ok := grain.Request(ctx.Message())
	if !ok {
		return
	}
	var err error
	switch method {
	case MsgJob:
		var j *Job
		if j, err = grain.Decode[Job](in); err == nil {
			if j.Parsed == nil { // it crossed the wire: parsed here, off the worker (sharedPass reads its size)
				j.Parsed, _ = Parse(j.Kind, j.Payload) // an error is the operation's, reported when it begins
			}
			e.submit(j)
		}
	case MsgCancel:
		var r *JobRef
		if r, err = grain.Decode[JobRef](in); err == nil {
			e.cancel(r)
		}
	case MsgRelease:
		var r *JobRef
		if r, err = grain.Decode[JobRef](in); err == nil {
			e.mu.Lock()
			if e.admit(r.RunID, r.Epoch, "release") {
				// The run has ended: its activations send nothing more.
				e.release = append(e.release, r.RunID)
				delete(e.fence, r.RunID)
			}
			e.mu.Unlock()
			e.wake.Signal()
		}
	default:
		err = fmt.Errorf("unknown method %q", method)
	}
	if err != nil {
		e.sys.env.Log.Error("executor command", "method", method, "err", err)
	}
}

func jobKey(runID string, seq int64) string { return runID + "/" + strconv.FormatInt(seq, 10) }

// submit queues a job in its organization's line. A task of the same run
// from an older activation is cancelled: the newer activation fenced it.
func (e *Trainer) submit(j *Job) {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := &task{j: j, org: j.Tenant.Org, ctx: ctx, cancel: cancel}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		// The operation is still pending on disk and runs after the next
		// start.
		cancel(errStopping)
		e.sys.env.Log.Info("job not started: the node is stopping", "run", j.RunID, "seq_id", j.SeqID)
		return
	}
	if !e.admit(j.RunID, j.Epoch, "job") {
		cancel(errFenced)
		return
	}
	for _, old := range e.tasks {
		if old.j.RunID == j.RunID && old.j.Epoch < j.Epoch {
			old.cancel(errFenced)
		}
	}
	e.tasks[jobKey(j.RunID, j.SeqID)] = t
	e.ready.push(t.org, t)
	e.wake.Signal()
}

// forget drops an ended task (under e.mu); a newer activation's task of
// the same operation may have taken its key already.
func (e *Trainer) forget(t *task) {
	key := jobKey(t.j.RunID, t.j.SeqID)
	if e.tasks[key] == t {
		delete(e.tasks, key)
	}
}

// admit checks a command of run id's activation epoch against the fence
// (under e.mu), counting and logging a refusal.
func (e *Trainer) admit(runID string, epoch uint64, what string) bool {
	if e.fence.admit(runID, epoch) {
		return true
	}
	e.sys.env.Metrics.Fenced("trainer")
	e.sys.env.Log.Warn("executor refused a stale activation's command", "run", runID, "command", what, "epoch", epoch, "current", e.fence.current(runID))
	return false
}

func (e *Trainer) cancel(r *JobRef) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.admit(r.RunID, r.Epoch, "cancel") {
		return
	}
	if t := e.tasks[jobKey(r.RunID, r.SeqID)]; t != nil && t.j.Epoch == r.Epoch {
		t.cancel(nil)
	}
}

// Waiting is the number of tasks waiting in line for their turn.
func (e *Trainer) Waiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ready.len()
}

// Stopping tells whether the node has begun stopping (Drain was called).
func (e *Trainer) Stopping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}

// Drain stops starting operations and lets the started ones run; when ctx
// ends first, they are cut (each goes back to pending, recorded so by its
// run) before it returns.
func (e *Trainer) Drain(ctx context.Context) {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.wake.Signal()
	select {
	case <-e.drained:
		return
	case <-ctx.Done():
	}
	e.mu.Lock()
	for _, t := range e.tasks {
		t.cancel(errStopping)
	}
	e.mu.Unlock()
	<-e.drained
}

// work runs slices until the executor is drained.
func (e *Trainer) work() {
	defer close(e.drained)
	par.EngineThread()
	for {
		t := e.next()
		if t == nil {
			return
		}
		e.slice(t)
		// With a backlog the worker ran slice after slice on one
		// processor, and Go preempts a running goroutine only after 10 ms:
		// the request goroutines queued behind it waited that long. Yielding
		// after each lets them go first (it shows in bench/apibench's submit
		// p99). Where the engine has threads of its own at a lower priority
		// (par.Configure), the OS runs the requests first instead.
		par.Yield()
	}
}

// next waits for the next task whose turn it is, dropping released
// trainers meanwhile; nil once the executor is stopping and no started
// task is left.
func (e *Trainer) next() *task {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		releases, trim := e.release, e.trim
		e.release, e.trim = nil, false
		e.mu.Unlock()
		for _, id := range releases {
			e.drop(id)
		}
		if trim { // the sampling executor is short of memory
			for id, ts := range e.trainers {
				if !e.pinned(ts) {
					e.evict(id)
				}
			}
		}
		e.mu.Lock()
		for {
			t, ok := e.ready.pop()
			if !ok {
				break
			}
			if e.stopping && t.started.IsZero() {
				e.forget(t)
				t.cancel(errStopping)
				continue
			}
			return t
		}
		if e.stopping && len(e.tasks) == 0 {
			return nil
		}
		e.wake.Wait()
	}
}

// slice runs one slice of t, then either queues it for its next turn or
// reports how it ended.
func (e *Trainer) slice(t *task) {
	if t.chore != nil {
		e.runChore(t)
		return
	}
	var d *Done
	var err error
	switch {
	case t.started.IsZero() && t.ctx.Err() != nil:
		d = &Done{Status: states.OpCancelled, Code: CodeCancelled, Message: "cancelled before it started"}
	case t.started.IsZero():
		t.started = time.Now()
	}
	if d == nil {
		err = grain.Guard(e.sys.env.Log, "executor "+t.j.Kind, func() (err error) {
			d, err = e.step(t)
			return err
		})
	}
	e.ended(t, d, err)
}

// ended takes the outcome of t's slice: more to do (d and err nil) puts
// it back in line, an error or a Done reports how it ended.
func (e *Trainer) ended(t *task, d *Done, err error) {
	j := t.j
	switch {
	case err != nil:
		if errors.Is(err, errNoRoom) && t.ctx.Err() == nil { // wait for memory
			if e.backInLine(t) {
				time.Sleep(roomWait)
			}
			return
		}
		if errors.Is(err, grain.ErrPanic) {
			e.drop(j.RunID) // whatever it holds now is suspect: rebuild it
		}
		d = failure(t.ctx, err)
	case d == nil: // more slices to go
		e.backInLine(t)
		return
	}
	took := time.Duration(0)
	if !t.started.IsZero() {
		took = time.Since(t.started)
	}
	d.Epoch, d.SeqID, d.DurationMS = j.Epoch, j.SeqID, float64(took.Microseconds())/1000
	e.sys.env.Metrics.Executed(j.Kind, d.Status, took)
	// The executor's audit trail: what ran here, under which activation of
	// its run (at debug level; the cluster test reads it).
	e.sys.env.Log.Debug("executed", "run", j.RunID, "seq", j.SeqID, "epoch", j.Epoch, "kind", j.Kind, "status", d.Status)
	if t.mark != nil {
		t.mark.Stop()
	}
	if t.rb != nil { // ended in the middle of a rebuild
		e.sys.mem.give(t.rb.ts.bytes)
		t.rb = nil
	}
	e.mu.Lock()
	e.forget(t)
	e.mu.Unlock()
	e.sys.env.Reports.RunDone(j.RunID, d)
}

// backInLine puts t back in its organization's line for its next turn, and
// says whether it is alone there.
func (e *Trainer) backInLine(t *task) (alone bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	alone = e.ready.len() == 0
	e.ready.push(t.org, t)
	return alone
}

// markAfter is how long an operation runs before the executor tells its
// run that it started (run.exec_started, which writes it executing): most
// operations of a busy run end sooner, and their outcome is then their only
// write after the one that accepted them (a third write per operation cost
// a sixth of the submissions/s in bench/apibench).
const markAfter = 20 * time.Millisecond

// markStarted tells the run that t's own work began, its trainer ready
// (rebuilding it replays operations that ran before: a node that dies then
// is not this operation's doing): at once for the first operation of a run
// activation (after a restart it is the one the node may have died under,
// and a crash loop must be counted however fast it crashes), markAfter
// later for the others, unless they have ended by then. So a restart finds
// executing only what was really running, and the attempts of an operation
// that keeps taking the node down are counted.
func (e *Trainer) markStarted(t *task) {
	j := t.j
	report := func() {
		e.sys.env.Reports.RunStarted(j.RunID, Started{Epoch: j.Epoch, SeqID: j.SeqID})
	}
	if j.First {
		report()
		return
	}
	t.mark = time.AfterFunc(markAfter, report)
}

// step runs t's next slice: its trainer first (rebuilt if this node does
// not hold it at the job's state), then the operation, a forward or
// forward_backward one micro-batch per slice (shared with other runs',
// see sharedPass). It returns nil, nil while there is more to do.
func (e *Trainer) step(t *task) (*Done, error) {
	j := t.j
	if err := t.ctx.Err(); err != nil {
		return nil, err
	}
	FaultHook(j)
	if ready, err := e.begin(t); !ready || err != nil {
		return nil, err
	}
	if t.pass == nil {
		out, err := e.apply(t.ctx, t.ts, j, j.OpID, j.Kind, j.Payload, j.Parsed)
		if err != nil {
			return nil, err
		}
		return e.succeeded(t, out)
	}
	if err := e.sharedPass(t); err != nil {
		return nil, err
	}
	return e.passed(t)
}

// begin readies t: its trainer (false while it is being rebuilt, one
// replayed operation a slice), then the word that it started, its
// progress reports, its parsed payload and, for a forward or
// forward_backward, its pass.
func (e *Trainer) begin(t *task) (bool, error) {
	j := t.j
	if t.ts == nil {
		ts, err := e.trainer(t)
		if err != nil || ts == nil {
			return false, err
		}
		t.ts = ts
		e.markStarted(t)
		started := time.Now()
		last := started // the first report after progressEvery: short work writes none
		t.ctx = train.WithProgress(t.ctx, func(doneTokens, total int) {
			if now := time.Now(); now.Sub(last) >= progressEvery {
				last = now
				e.sys.env.Reports.RunProgress(j.RunID, Progress{Epoch: j.Epoch, SeqID: j.SeqID, Progress: opProgress{TokensDone: doneTokens, TokensTotal: total}.encode(started)})
			}
		})
	}
	t.ts.lastUsed = time.Now()
	if j.Parsed == nil {
		p, err := Parse(j.Kind, j.Payload)
		if err != nil {
			return false, err
		}
		j.Parsed = p
	}
	if b, ok := j.Parsed.(*payload.Batch); ok && t.pass == nil {
		pass, err := t.ts.tr.Begin(b.Datums(), b.LossFn, b.LossFnConfig, j.Kind == payload.ForwardBackward)
		if err != nil {
			return false, err
		}
		t.pass = pass
	}
	return true, nil
}

// passed is t's outcome after a micro-batch: nil, nil while its pass has
// more to run.
func (e *Trainer) passed(t *task) (*Done, error) {
	if !t.pass.Done() {
		return nil, nil
	}
	o, err := t.pass.Output()
	if err != nil {
		return nil, err
	}
	return e.succeeded(t, batchApplied(t.j.Kind, o))
}

// maxShared bounds the runs whose micro-batches one shared pass takes.
const maxShared = 64

// sharedPass runs t's next micro-batch in one pass through the base model
// with those of other runs' operations of t's kind waiting in line on the
// same model whose trainers this node holds at their state (train.
// NextShared): the base weights are read once for all of them, which is
// what makes passes of a few tokens each cheaper (BenchmarkSharedPasses in
// kernels/train), and each run's results are those of a pass of its own,
// bit for bit. Only pooled runs share (Job.Pooled). Together they keep to
// train.MicroTokens. Each companion's slice ends here as its own would
// (ended); t's outcome is the caller's. Cancels are seen between slices,
// as for a pass alone.
func (e *Trainer) sharedPass(t *task) error {
	if !t.j.Pooled {
		return e.passOf([]*task{t})
	}
	room := train.MicroTokens - t.pass.NextTokens()
	eng := t.ts.engine
	e.mu.Lock()
	cands := e.ready.takeIf(maxShared-1, func(c *task) bool {
		if c.chore != nil || !c.j.Pooled || c.j.Kind != t.j.Kind || c.rb != nil || c.ctx.Err() != nil {
			return false
		}
		ts := c.ts
		if ts == nil { // not started: only if its trainer is here at its state
			ts = e.trainers[c.j.RunID]
			if ts == nil || ts.epoch != c.j.Epoch || ts.stateSeq != c.j.StateSeq {
				return false
			}
		}
		n := batchTokens(c)
		if ts.engine != eng || n > room {
			return false
		}
		room -= n
		return true
	})
	e.mu.Unlock()
	group := []*task{t}
	for _, c := range cands {
		if c.started.IsZero() {
			c.started = time.Now()
		}
		var ready bool
		err := grain.Guard(e.sys.env.Log, "executor "+c.j.Kind, func() (err error) {
			FaultHook(c.j)
			ready, err = e.begin(c)
			return err
		})
		if err != nil || !ready || !t.pass.Shares(c.pass) {
			e.ended(c, nil, err)
			continue
		}
		group = append(group, c)
	}
	return e.passOf(group)
}

// passOf runs the next micro-batch of each task of group in one pass; the
// outcomes of all but the first are taken here.
func (e *Trainer) passOf(group []*task) error {
	ctxs, passes := make([]context.Context, len(group)), make([]train.Batch, len(group))
	for i, g := range group {
		// Not cancelled since the slice began: the pass runs to its end,
		// as a pass alone's micro-batch does, and each hears of its progress.
		ctxs[i], passes[i] = context.WithoutCancel(g.ctx), g.pass
	}
	err := grain.Guard(e.sys.env.Log, "executor shared pass", func() error { return group[0].ts.engine.NextShared(ctxs, passes) })
	e.sys.env.Metrics.Pass(len(group))
	for _, c := range group[1:] {
		if err != nil {
			e.ended(c, nil, err)
			continue
		}
		var d *Done
		cerr := grain.Guard(e.sys.env.Log, "executor "+c.j.Kind, func() (err error) {
			d, err = e.passed(c)
			return err
		})
		e.ended(c, d, cerr)
	}
	return err
}

// batchTokens is what c's next micro-batch takes at most: its pass's next
// one, or, not begun, its whole batch.
func batchTokens(c *task) int {
	if c.pass != nil {
		return c.pass.NextTokens()
	}
	b, ok := c.j.Parsed.(*payload.Batch)
	if !ok {
		return math.MaxInt // its payload did not parse: it fails alone when it begins
	}
	n := 0
	for _, d := range b.Data {
		if d.ModelInput != nil {
			n += len(d.ModelInput.TokenIDs)
		}
	}
	return n
}

// succeeded is the report on an operation that ran to its end; a
// snapshot may follow it.
func (e *Trainer) succeeded(t *task, out *applied) (*Done, error) {
	j, ts := t.j, t.ts
	d := &Done{Status: states.OpSucceeded, Metrics: out.metrics, Tokens: out.tokens, Steps: int64(ts.tr.Steps()),
		Checkpoint: out.checkpoint, Artifact: out.artifact, WeightVersion: out.weightVersion, Handoff: out.handoff}
	// go-json: encoding/json's reflection showed in bench/apibench's CPU
	// profiles; the replies around the result are go-json's already.
	var err error
	if d.Result, err = gojson.Marshal(out.result); err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	k := KindOf(j.Kind)
	if k.Mutates {
		ts.stateSeq = j.SeqID
	}
	if k.Snapshot == snapshotPeriodic && time.Since(ts.lastSnapshot) >= e.sys.env.SnapshotEvery || k.Snapshot == snapshotAlways {
		if err := e.snapshot(j.RunID, ts); err != nil {
			e.sys.env.Log.Error("trainer snapshot", "run", j.RunID, "seq", j.SeqID, "err", err)
		} else {
			d.SnapshotSeq = ts.snapshotSeq
		}
	}
	return d, nil
}

// Started is the executor's word that an operation's own work began.
type Started struct {
	Epoch uint64
	SeqID int64
}

// failure classifies an error: a cancel (or, at drain's deadline, a cut
// that sends the operation back to pending), the caller's input (its
// engine code), or an internal fault.
func failure(ctx context.Context, err error) *Done {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		if errors.Is(context.Cause(ctx), errStopping) {
			return &Done{Status: states.OpPending, Message: "cut short by the node's stop; it runs again after the next start"}
		}
		return &Done{Status: states.OpCancelled, Code: CodeCancelled, Message: "cancelled while executing"}
	}
	if code := kerr.Code(err); code != "" {
		return &Done{Status: states.OpFailed, Code: code, Message: err.Error()}
	}
	return &Done{Status: states.OpFailed, Code: grain.CodeInternal, Message: err.Error()}
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
// replaces it), through its kind's entry. p is raw parsed, or nil to parse
// it here.
func (e *Trainer) apply(ctx context.Context, ts *trainerState, j *Job, opID, kind string, raw json.RawMessage, p payload.Parsed) (*applied, error) {
	k := KindOf(kind)
	if k.train == nil {
		return nil, fmt.Errorf("executor: no engine primitive for %s", kind)
	}
	if p == nil {
		var err error
		if p, err = Parse(kind, raw); err != nil {
			return nil, err
		}
	}
	return k.train(e, ctx, ts, j, opID, p)
}

// forward and forwardBackward run a whole batch at once (on replay; a job
// runs its batch a micro-batch per slice, see step).
func (e *Trainer) forward(ctx context.Context, ts *trainerState, _ *Job, _ string, p payload.Parsed) (*applied, error) {
	return wholeBatch(ctx, payload.Forward, ts.tr.Forward, p)
}

func (e *Trainer) forwardBackward(ctx context.Context, ts *trainerState, _ *Job, _ string, p payload.Parsed) (*applied, error) {
	return wholeBatch(ctx, payload.ForwardBackward, ts.tr.ForwardBackward, p)
}

// wholeBatch runs a batch through run (the trainer's Forward or
// ForwardBackward).
func wholeBatch(ctx context.Context, kind string, run func(context.Context, []train.Datum, string, map[string]float64) (*train.Output, error), p payload.Parsed) (*applied, error) {
	b := p.(*payload.Batch)
	out, err := run(ctx, b.Datums(), b.LossFn, b.LossFnConfig)
	if err != nil {
		return nil, err
	}
	return batchApplied(kind, out), nil
}

// optimStep steps AdamW on the run's adapter.
func (e *Trainer) optimStep(_ context.Context, ts *trainerState, _ *Job, _ string, p payload.Parsed) (*applied, error) {
	m, err := ts.tr.OptimStep(p.(*payload.Step).Params())
	if err != nil {
		return nil, err
	}
	clipped := 0.0
	if m.Clipped {
		clipped = 1
	}
	values := map[string]float64{"grad_norm": m.GradNorm, "learning_rate": m.LR, "step": float64(m.Step), "clipped": clipped}
	return &applied{result: optimResult{Metrics: values}, metrics: values}, nil
}

// saveWeightsOp is save_weights_for_sampler: the run's adapter as its next
// weight version, which its sampler then loads.
func (e *Trainer) saveWeightsOp(_ context.Context, ts *trainerState, j *Job, _ string, _ payload.Parsed) (*applied, error) {
	v, err := e.saveWeights(ts, j)
	return &applied{result: weightsResult{v, j.SamplerID}, weightVersion: v}, err
}

// sampleForRun is a run-scoped sample: the run's current weights go to its
// sampler (a new version only if the trainer moved since the last one),
// which samples and reports to the run.
func (e *Trainer) sampleForRun(_ context.Context, ts *trainerState, j *Job, _ string, _ payload.Parsed) (*applied, error) {
	v := j.WeightVersion
	if v == 0 || j.WeightsSeq != j.StateSeq {
		var err error
		if v, err = e.saveWeights(ts, j); err != nil {
			return nil, err
		}
	}
	return &applied{weightVersion: v, handoff: true}, nil
}

// batchApplied is what a forward or forward_backward produced; the latter
// leaves a step record, with the mean loss per token beside the sum.
func batchApplied(kind string, out *train.Output) *applied {
	tokens := int64(out.Metrics["tokens:sum"])
	res := forwardResult{LossFnOutputs: make([]lossOutput, len(out.Losses)), Metrics: out.Metrics}
	for i := range out.Losses {
		res.LossFnOutputs[i] = lossOutput{Logprobs: out.Logprobs[i], Loss: out.Losses[i]}
	}
	if kind == payload.Forward {
		return &applied{result: res, tokens: tokens}
	}
	values := make(map[string]float64, len(out.Metrics)+1)
	for k, v := range out.Metrics {
		values[k] = v
	}
	if n := out.Metrics["tokens:sum"]; n > 0 {
		values["loss:mean"] = out.Metrics["loss:sum"] / n
	}
	return &applied{result: res, metrics: values, tokens: tokens}
}

// weightsResult is the result of save_weights_for_sampler.
type weightsResult struct {
	WeightVersion int64  `json:"weight_version"`
	SamplerID     string `json:"sampler_id"`
}

// saveWeights writes the run's adapter as its next weight version.
func (e *Trainer) saveWeights(ts *trainerState, j *Job) (int64, error) {
	v := j.WeightVersion + 1
	err := persistence.WriteDir(e.sys.env.Volume.WeightsDir(j.RunID, v), func(tmp string) error {
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
// compared with the recorded one to show it. A rebuild goes one replayed
// operation per slice (trainer returns nil until it is done), so that a
// long replay takes turns with other organizations' work like any other.
func (e *Trainer) trainer(t *task) (*trainerState, error) {
	j := t.j
	if t.rb == nil {
		ts := e.trainers[j.RunID]
		switch {
		case ts != nil && j.Epoch < ts.epoch:
			return nil, errFenced // a newer activation of the run has it
		case ts != nil && j.Epoch == ts.epoch && ts.stateSeq == j.StateSeq:
			return ts, nil
		}
		rb, err := e.startRebuild(j)
		if err != nil {
			return nil, err
		}
		if t.rb = rb; len(rb.replay) > 0 {
			return nil, nil
		}
	}
	rb := t.rb
	if rb.done < len(rb.replay) {
		op := rb.replay[rb.done]
		out, err := e.apply(t.ctx, rb.ts, j, op.ID, op.Kind, op.Payload, nil)
		if err != nil {
			return nil, fmt.Errorf("replay %s seq %d of %s: %w", op.Kind, op.SeqID, j.RunID, err)
		}
		e.checkReplay(op, out.result)
		rb.ts.stateSeq = op.SeqID
		if rb.done++; rb.done < len(rb.replay) {
			return nil, nil
		}
	}
	e.sys.env.Log.Info("trainer rebuilt", "run", j.RunID, "snapshot_seq", j.SnapshotSeq, "replayed", len(rb.replay), "state_seq", j.StateSeq)
	e.trainers[j.RunID], t.rb = rb.ts, nil
	return rb.ts, nil
}

// rebuild is a run's trainer being rebuilt for a task: its base state
// (snapshot, checkpoint or a fresh adapter), the operations to replay on
// it, and how many have been. Its memory is taken when it starts and given
// back if the task ends before it is done.
type rebuild struct {
	ts     *trainerState
	replay []*persistence.Operation
	done   int
}

// startRebuild drops the run's trainer (built for an older activation,
// which a newer one fenced, perhaps in the middle of an operation, or at
// another state), takes memory for a new one, loads its base state and
// lists the operations to replay.
func (e *Trainer) startRebuild(j *Job) (*rebuild, error) {
	e.drop(j.RunID)
	eng, err := e.sys.trainingEngine(j.BaseModel)
	if err != nil {
		return nil, err
	}
	need := TrainerBytes(eng.Config(), &j.LoRA)
	if err := e.room(need, j.RunID); err != nil {
		return nil, err
	}
	ts := &trainerState{engine: eng, baseModel: j.BaseModel, epoch: j.Epoch, lastSnapshot: time.Now(), snapshotSeq: j.SnapshotSeq, bytes: need}
	rb := &rebuild{ts: ts}
	switch {
	case j.SnapshotSeq > 0:
		if ts.tr, err = eng.LoadLearner(e.sys.env.Volume.SnapshotDir(j.RunID, j.SnapshotSeq)); err != nil {
			err = fmt.Errorf("load snapshot %d of %s: %w", j.SnapshotSeq, j.RunID, err)
		}
	case j.FromCheckpoint:
		if ts.tr, err = eng.LoadLearner(e.sys.env.Volume.InitialDir(j.RunID)); err != nil {
			err = fmt.Errorf("load the initial state of %s: %w", j.RunID, err)
		}
	default:
		var ad *lora.Adapter[float32]
		if ad, err = lora.New(eng.Config(), LoRAConfig(&j.LoRA)); err == nil {
			ts.tr = eng.NewLearner(ad)
		}
	}
	if err == nil {
		err = e.sys.env.Store.View(func(tx persistence.Tx) error {
			return persistence.Each(tx, persistence.Ops, []byte(j.RunID), persistence.SeqKey(j.RunID, j.SnapshotSeq), func(_ []byte, op *persistence.Operation) (bool, error) {
				if op.SeqID > j.StateSeq {
					return false, nil
				}
				if op.Status == states.OpSucceeded && KindOf(op.Kind).Mutates {
					rb.replay = append(rb.replay, op)
				}
				return true, nil
			})
		})
		if err != nil {
			err = fmt.Errorf("read operations to replay: %w", err)
		}
	}
	if err != nil {
		e.sys.mem.give(need)
		return nil, err
	}
	return rb, nil
}

// room takes need bytes of the memory budget for run's trainer, evicting
// the least recently used trainers that no operation is in the middle of
// until it fits. When none is left to evict it asks the sampling executor
// to let go of its idle adapters, and the operation waits (errNoRoom).
func (e *Trainer) room(need int64, run string) error {
	for !e.sys.mem.take(need) {
		victim := ""
		for id, ts := range e.trainers {
			if id != run && !e.pinned(ts) && (victim == "" || ts.lastUsed.Before(e.trainers[victim].lastUsed)) {
				victim = id
			}
		}
		if victim == "" {
			e.sys.samplingTrim()
			return errNoRoom
		}
		e.evict(victim)
	}
	return nil
}

// pinned reports whether an operation in progress holds ts (a pass between
// two of its micro-batches).
func (e *Trainer) pinned(ts *trainerState) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.tasks {
		if t.ts == ts {
			return true
		}
	}
	return false
}

// evict lets a run's trainer go to free memory: to a snapshot first when
// it is ahead of its last one and holds no gradient (the snapshot then
// spares the run's next operation the replay), and the run records it.
func (e *Trainer) evict(run string) {
	ts := e.trainers[run]
	if ts.stateSeq > ts.snapshotSeq && ts.tr.PendingGradients() == 0 {
		if err := e.snapshot(run, ts); err != nil {
			e.sys.env.Log.Error("snapshot before eviction", "run", run, "err", err)
		} else {
			e.sys.env.Reports.RunSnapshotted(run, Snapshotted{Epoch: ts.epoch, SnapshotSeq: ts.snapshotSeq})
		}
	}
	e.sys.env.Log.Info("trainer evicted", "run", run, "state_seq", ts.stateSeq, "mib", ts.bytes>>20)
	e.drop(run)
}

// drop forgets a run's trainer and gives its memory back.
func (e *Trainer) drop(run string) {
	if ts := e.trainers[run]; ts != nil {
		delete(e.trainers, run)
		e.sys.mem.give(ts.bytes)
	}
}

// Snapshotted tells a run that its trainer was written as a snapshot at
// SnapshotSeq (an eviction's): rebuilding it starts there.
type Snapshotted struct {
	Epoch       uint64
	SnapshotSeq int64
}

// checkReplay logs a replayed forward_backward whose loss differs from the
// recorded one: the rebuilt trainer would then not be the one callers saw.
func (e *Trainer) checkReplay(op *persistence.Operation, res any) {
	fr, ok := res.(forwardResult)
	if !ok {
		return
	}
	var recorded forwardResult
	if err := json.Unmarshal(op.Result, &recorded); err != nil {
		return
	}
	if a, b := fr.Metrics["loss:sum"], recorded.Metrics["loss:sum"]; a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
		e.sys.env.Log.Warn("replayed loss differs from the recorded one", "run", op.RunID, "seq", op.SeqID, "replayed", a, "recorded", b)
	}
}

// snapshot writes the trainer (after an optim_step, so no gradient is
// pending) to the run volume. It keeps the previous snapshot until a later
// one replaces it: the run record may still name it if the node dies before
// the grain records this one.
func (e *Trainer) snapshot(runID string, ts *trainerState) error {
	dir := e.sys.env.Volume.SnapshotDir(runID, ts.stateSeq)
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
