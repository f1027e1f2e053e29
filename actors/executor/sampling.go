package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/grain"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/states"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/par"
	"github.com/wts-project/wts/kernels/sampler"
)

// Sampling runs the samplers of this node: never on the trainer's
// executor, so sampling never waits behind a training step. It holds each
// sampler's adapter at one weight version beside the shared base model;
// a sampler released for idleness drops its adapter, and the next job loads
// it again.
//
// Sample requests decode together (continuous batching): every step of its
// worker advances every request in flight, of every sampler on the same
// base model, by one token in one batched pass (sampler.Step), and a
// request that arrives joins at the next step.
type Sampling struct {
	sys  *node
	cmds *inbox[samplingCmd]
	done chan struct{}
	// stopping: jobs not yet started are left (pending on disk); cut: drain's
	// deadline passed, and the requests in flight go back to pending.
	stopping, cut atomic.Bool

	// Owned by the worker goroutine.
	held     map[string]*heldAdapter // sampler id → its adapter in memory
	flying   []*flight               // sample requests decoding
	starting []*flight               // sample requests taken, to prefill together
	// cancelled holds cancels of jobs not here yet (a run-scoped sample
	// waiting for its sampler's sync): such a job ends cancelled on arrival.
	cancelled map[SamplingRef]time.Time
	waiting   []*SamplingJob // jobs whose adapter waits for memory
	fence     epochFence     // by the grain that sent a job: an older activation's is refused
	lastTrim  time.Time      // when the trainer's executor was last asked for memory
	lastRetry time.Time      // when the waiting jobs last tried again
}

// cancelKeep is how long a cancel waits for its job to arrive.
const cancelKeep = 10 * time.Minute

// samplingCmd is a job, or (release set) the release of a sampler's
// adapter, or (cancel set) the cancel of a job.
type samplingCmd struct {
	job     *SamplingJob
	release string
	cancel  *SamplingRef
	trim    bool // let go of the idle adapters: the trainers need memory
}

// SamplingRef names a sampling job by the grain that hears its outcome (a
// run for a run-scoped sample, else the sampler) and its operation's
// seq_id there.
type SamplingRef struct {
	ForRun  bool
	ReplyID string
	SeqID   int64
}

func (j *SamplingJob) ref() SamplingRef { return SamplingRef{j.ForRun, j.ReplyID, j.SeqID} }

// sender is the grain whose activation epoch the job carries: the one that
// hears its outcome (the sampler for a sync).
func (j *SamplingJob) sender() string {
	switch {
	case j.ForRun:
		return "run/" + j.ReplyID
	case j.ReplyID != "":
		return "sampler/" + j.ReplyID
	}
	return "sampler/" + j.SamplerID
}

// flight is a sample request, from its start to its last token.
type flight struct {
	job       *SamplingJob
	held      *heldAdapter
	req       sampler.Request
	stream    *sampler.Stream // once started
	start     time.Time
	cancelled bool      // its operation was cancelled: it ends at the next step
	kv        int64     // the memory its KV caches took, once launched
	reported  time.Time // its last progress report (or its start)
}

// heldAdapter is a sampler's adapter, made ready for its engine.
type heldAdapter struct {
	version int64
	engine  sampler.Engine
	adapter sampler.Adapter
	bytes   int64 // its share of the memory budget
}

// SamplingJob is one piece of sampler work: a sync (Kind empty: load the
// weight version), or a sample or logprobs operation at that version.
// ForRun and ReplyID name the grain that hears the outcome: the sampler,
// or for a run-scoped sample the run.
type SamplingJob struct {
	SamplerID string
	RunID     string
	BaseModel string
	Version   int64
	Epoch     uint64
	SeqID     int64
	Kind      string
	Payload   json.RawMessage
	ForRun    bool
	ReplyID   string

	Parsed payload.Parsed `msgpack:"-"` // Payload parsed, when the grain had it (it is not encoded)
}

// Synced is the sampling executor's report on a sync.
type Synced struct {
	Epoch   uint64
	Version int64
	Code    string
	Message string
}

func newSampling(s *node) *Sampling {
	e := &Sampling{sys: s, cmds: newInbox[samplingCmd](1024), done: make(chan struct{}), held: map[string]*heldAdapter{},
		cancelled: map[SamplingRef]time.Time{}, fence: epochFence{}}
	go e.work()
	return e
}

// work takes commands and steps the requests in flight: when none is
// decoding it waits for a command; otherwise it takes whatever has arrived
// and decodes one more token for everything in flight. Stopping, it takes
// no new job and finishes the requests in flight, or at drain's deadline
// cuts them (each goes back to pending).
func (e *Sampling) work() {
	defer close(e.done)
	par.EngineThread()
	open := true
	for open || len(e.flying)+len(e.starting) > 0 {
		switch {
		case len(e.flying) > 0 || len(e.starting) > 0:
		case len(e.waiting) > 0 && open: // for a command, or memory
			select {
			case c, ok := <-e.cmds.c:
				if !ok {
					open = false
					continue
				}
				e.take(c)
			case <-time.After(roomWait):
			}
		default:
			c, ok := <-e.cmds.c
			if !ok {
				return
			}
			e.take(c)
		}
	drain:
		for open {
			select {
			case c, ok := <-e.cmds.c:
				if !ok {
					open = false
					break drain
				}
				e.take(c)
			default:
				break drain
			}
		}
		if e.cut.Load() {
			for _, f := range e.requests() {
				e.end(f, &Done{Status: states.OpPending, Message: "cut short by the node's stop; it runs again after the next start"})
			}
			return
		}
		if waiting := e.waiting; len(waiting) > 0 && !e.stopping.Load() && time.Since(e.lastRetry) >= roomWait {
			e.waiting, e.lastRetry = nil, time.Now()
			for _, j := range waiting {
				e.begin(j)
			}
		}
		e.launch()
		e.step()
	}
}

// Drain stops taking jobs and lets the requests in flight finish; when ctx
// ends first, they are cut.
func (e *Sampling) Drain(ctx context.Context) {
	e.stopping.Store(true)
	e.cmds.close()
	select {
	case <-e.done:
		return
	case <-ctx.Done():
	}
	e.cut.Store(true)
	<-e.done
}

// launch starts the sample requests taken since the last step, their
// prompts prefilled together (one pass per base model).
func (e *Sampling) launch() {
	var ready, later []*flight
	for _, f := range e.starting {
		switch {
		case f.cancelled:
			e.end(f, &Done{Status: states.OpCancelled, Code: CodeCancelled, Message: "cancelled before it started"})
		case f.kv > 0:
			ready = append(ready, f)
		default:
			// The request's KV caches, sized before any is allocated; it
			// waits for them when the budget is short.
			c := f.held.engine.Config()
			kv := kvBytes(c, len(f.req.Prompt), f.req.NumSamples, f.req.Params.MaxTokens)
			if !e.sys.mem.take(kv) {
				later = append(later, f)
				continue
			}
			f.kv = kv
			ready = append(ready, f)
		}
	}
	e.starting = later
	if len(later) > 0 {
		e.short()
		if len(ready) == 0 && len(e.flying) == 0 {
			time.Sleep(roomWait)
		}
	}
	for _, fs := range byEngine(ready, func(f *flight) sampler.Engine { return f.held.engine }) {
		zs, qs := make([]sampler.Adapter, len(fs)), make([]sampler.Request, len(fs))
		for i, f := range fs {
			e.started(f.job)
			zs[i], qs[i] = f.held.adapter, f.req
		}
		var streams []*sampler.Stream
		var errs []error
		err := grain.Guard(e.sys.env.Log, "sampling prefill", func() error {
			streams, errs = sampler.StartMany(fs[0].held.engine, zs, qs)
			return nil
		})
		for i, f := range fs {
			ferr := err
			if ferr == nil {
				ferr = errs[i]
			}
			if ferr != nil {
				e.end(f, failure(context.Background(), ferr))
				continue
			}
			f.stream = streams[i]
			e.flying = append(e.flying, f)
		}
	}
}

// started tells the grain that hears the job's outcome that its work
// began, which marks its operation executing: a sampler's, or for a
// run-scoped sample the run's (the trainer's part, saving the weights,
// often ends before the trainer would have marked it).
func (e *Sampling) started(j *SamplingJob) {
	st := Started{Epoch: j.Epoch, SeqID: j.SeqID}
	if j.ForRun {
		e.sys.env.Reports.RunStarted(j.ReplyID, st)
		return
	}
	e.sys.env.Reports.SamplerStarted(j.ReplyID, st)
}

// take carries out a command: a sync or a logprobs at once, a sample by
// joining the requests to start (launch prefills them together, and they
// join the requests in flight).
func (e *Sampling) take(c samplingCmd) {
	switch {
	case c.release != "":
		e.drop(c.release)
		return
	case c.trim:
		e.trimIdle("")
		return
	case c.cancel != nil:
		found := false
		for _, f := range e.requests() {
			if f.job.ref() == *c.cancel {
				f.cancelled, found = true, true
			}
		}
		now := time.Now()
		for ref, at := range e.cancelled {
			if now.Sub(at) > cancelKeep {
				delete(e.cancelled, ref)
			}
		}
		if !found {
			e.cancelled[*c.cancel] = now
		}
		return
	case e.stopping.Load():
		return // not started: pending on disk, it runs after the next start
	case !e.fence.admit(c.job.sender(), c.job.Epoch):
		e.sys.env.Metrics.Fenced("sampling")
		e.sys.env.Log.Warn("sampling executor refused a stale activation's job", "grain", c.job.sender(), "seq_id", c.job.SeqID, "epoch", c.job.Epoch)
		return
	}
	e.begin(c.job)
}

// begin starts a job (start), guarded: a panic fails that job alone. A job
// cancelled before it came (or while it waited for memory) ends so.
func (e *Sampling) begin(j *SamplingJob) {
	start := time.Now()
	if _, ok := e.cancelled[j.ref()]; ok && j.Kind != "" {
		delete(e.cancelled, j.ref())
		e.report(j, &Done{Status: states.OpCancelled, Code: CodeCancelled, Message: "cancelled before it started"}, start)
		return
	}
	if err := grain.Guard(e.sys.env.Log, "sampling "+j.Kind, func() error { e.start(j, start); return nil }); err != nil {
		e.report(j, failure(context.Background(), err), start)
	}
}

// end reports how a request in flight ended and gives its KV memory back.
func (e *Sampling) end(f *flight, d *Done) {
	e.sys.mem.give(f.kv)
	f.kv = 0
	e.report(f.job, d, f.start)
}

// short asks the trainer's executor, at most once a second, to evict its
// idle trainers: the samplers are waiting for memory.
func (e *Sampling) short() {
	if time.Since(e.lastTrim) >= time.Second {
		e.lastTrim = time.Now()
		e.sys.execTrim()
	}
}

// requests is every sample request in flight or about to start.
func (e *Sampling) requests() []*flight { return slices.Concat(e.flying, e.starting) }

// inUse reports whether a request in flight or about to start decodes
// with h.
func (e *Sampling) inUse(h *heldAdapter) bool {
	for _, f := range e.requests() {
		if f.held == h {
			return true
		}
	}
	return false
}

// trimIdle lets go of every adapter that nothing decodes with, but the
// one of sampler keep.
func (e *Sampling) trimIdle(keep string) {
	for id, h := range e.held {
		if id != keep && !e.inUse(h) {
			e.drop(id)
		}
	}
}

// drop lets go of a sampler's adapter (the next job loads it again).
func (e *Sampling) drop(samplerID string) {
	if h := e.held[samplerID]; h != nil {
		delete(e.held, samplerID)
		e.sys.mem.give(h.bytes)
	}
}

// start begins a job: a sync or a logprobs at once, a sample by joining
// the requests to launch.
func (e *Sampling) start(j *SamplingJob, start time.Time) {
	h, err := e.adapter(j)
	if errors.Is(err, errNoRoom) {
		e.waiting = append(e.waiting, j)
		return
	}
	switch {
	case j.Kind == "":
		rep := Synced{Epoch: j.Epoch, Version: j.Version}
		if err != nil {
			f := failure(context.Background(), err)
			rep.Code, rep.Message = f.Code, f.Message
		}
		e.sys.env.Reports.SamplerSynced(j.SamplerID, rep)
		return
	case err != nil:
		e.report(j, failure(context.Background(), err), start)
		return
	}
	k := KindOf(j.Kind)
	if k.sample == nil {
		e.report(j, failure(context.Background(), fmt.Errorf("sampler: no primitive for %s", j.Kind)), start)
		return
	}
	p := j.Parsed
	if p == nil {
		var err error
		if p, err = Parse(j.Kind, j.Payload); err != nil {
			e.report(j, failure(context.Background(), err), start)
			return
		}
	}
	k.sample(e, j, h, p, start)
}

// fly puts a sample in flight: it decodes a token a step with the others.
func (e *Sampling) fly(j *SamplingJob, h *heldAdapter, p payload.Parsed, start time.Time) {
	e.starting = append(e.starting, &flight{job: j, held: h, req: p.(*payload.SamplePayload).Request(), start: start, reported: time.Now()})
}

// logprobs scores a sequence at once, once its KV cache fits the budget.
func (e *Sampling) logprobs(j *SamplingJob, h *heldAdapter, pp payload.Parsed, start time.Time) {
	p := pp.(*payload.LogprobsPayload)
	kv := RequestKV(h.engine.Config(), p)
	if !e.sys.mem.take(kv) {
		e.short()
		e.waiting = append(e.waiting, j)
		return
	}
	defer e.sys.mem.give(kv)
	e.started(j)
	lps, err := sampler.Logprobs(h.engine, h.adapter, p.Input.TokenIDs)
	if err != nil {
		e.report(j, failure(context.Background(), err), start)
		return
	}
	e.report(j, succeeded(logprobsResult{lps, j.Version}, int64(len(p.Input.TokenIDs))), start)
}

// step decodes one token for every request in flight, one batched pass per
// base model, and reports the requests that finished. A group whose pass
// failed (a panic included) fails its requests only.
func (e *Sampling) step() {
	var streams []*sampler.Stream
	for _, f := range e.flying {
		if !f.stream.Done() && !f.cancelled {
			streams = append(streams, f.stream)
		}
	}
	failed := map[sampler.Engine]error{}
	for _, ss := range byEngine(streams, (*sampler.Stream).Engine) {
		if err := grain.Guard(e.sys.env.Log, "sampling step", func() error { return sampler.Step(ss) }); err != nil {
			failed[ss[0].Engine()] = err
		}
	}
	left := e.flying[:0]
	for _, f := range e.flying {
		err := failed[f.stream.Engine()]
		if err == nil {
			err = f.stream.Err()
		}
		switch {
		case f.cancelled:
			e.end(f, &Done{Status: states.OpCancelled, Code: CodeCancelled, Message: "cancelled while executing"})
		case err != nil:
			e.end(f, failure(context.Background(), err))
		case f.stream.Done():
			res := f.stream.Result()
			tokens := int64(len(f.req.Prompt)) // the prompt is metered with the generated tokens
			for _, s := range res.Sequences {
				tokens += int64(len(s.Tokens))
			}
			e.end(f, succeeded(sampleResult{res, f.job.Version}, tokens))
		default:
			e.progress(f)
			left = append(left, f)
		}
	}
	clear(e.flying[len(left):])
	e.flying = left
}

// progress reports a request's tokens and sequences so far to its
// operation's grain, every progressEvery: a short sample reports none.
func (e *Sampling) progress(f *flight) {
	now := time.Now()
	if now.Sub(f.reported) < progressEvery {
		return
	}
	f.reported = now
	tokens, stopped := f.stream.Progress()
	n := f.req.NumSamples
	op := opProgress{TokensDone: tokens, TokensTotal: n * f.req.Params.MaxTokens, SequencesDone: &stopped, SequencesTotal: &n}
	p := Progress{Epoch: f.job.Epoch, SeqID: f.job.SeqID, Progress: op.encode(f.start)}
	if f.job.ForRun {
		e.sys.env.Reports.RunProgress(f.job.ReplyID, p)
		return
	}
	e.sys.env.Reports.SamplerProgress(f.job.ReplyID, p)
}

// byEngine groups items by their engine (one per base model), in the
// order first seen.
func byEngine[T any](items []T, engine func(T) sampler.Engine) [][]T {
	index := map[sampler.Engine]int{}
	var groups [][]T
	for _, it := range items {
		g := engine(it)
		k, seen := index[g]
		if !seen {
			k, index[g] = len(groups), len(groups)
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], it)
	}
	return groups
}

// succeeded is the outcome of a sampler operation with result res.
func succeeded(res any, tokens int64) *Done {
	raw, err := json.Marshal(res)
	if err != nil {
		return failure(context.Background(), fmt.Errorf("encode result: %w", err))
	}
	return &Done{Status: states.OpSucceeded, Result: raw, Tokens: tokens}
}

// report tells the job's grain how it ended.
func (e *Sampling) report(j *SamplingJob, d *Done, start time.Time) {
	took := time.Since(start)
	d.Epoch, d.SeqID, d.DurationMS = j.Epoch, j.SeqID, float64(took.Microseconds())/1000
	e.sys.env.Metrics.Executed(j.Kind, d.Status, took)
	if j.ForRun {
		e.sys.env.Reports.RunDone(j.ReplyID, d)
		return
	}
	e.sys.env.Reports.SamplerDone(j.ReplyID, d)
}

// Receive takes the sampler grains' commands.
func (e *Sampling) Receive(ctx actor.Context) {
	method, in, _, ok := grain.Request(ctx.Message())
	if !ok {
		return
	}
	switch method {
	case MsgSample:
		j, err := grain.Decode[SamplingJob](in)
		if err != nil {
			e.sys.env.Log.Error("sampling command", "err", err)
			return
		}
		if !e.cmds.put(samplingCmd{job: j}) {
			// Stopping: the operation stays pending on disk and runs after
			// the next start.
			e.sys.env.Log.Info("sampling job not started: the node is stopping", "sampler", j.SamplerID, "seq_id", j.SeqID)
		}
	case MsgSamplingRelease:
		r, err := grain.Decode[JobRef](in)
		if err == nil {
			e.cmds.put(samplingCmd{release: r.RunID}) // RunID carries the sampler id
		}
	case MsgSamplingCancel:
		r, err := grain.Decode[SamplingRef](in)
		if err == nil {
			e.cmds.put(samplingCmd{cancel: r})
		}
	}
}

// adapter returns the sampler's adapter at version, loading it when the
// sampler holds another version or none.
func (e *Sampling) adapter(j *SamplingJob) (*heldAdapter, error) {
	if h := e.held[j.SamplerID]; h != nil && h.version == j.Version {
		return h, nil
	}
	eng, err := e.sys.samplingEngine(j.BaseModel)
	if err != nil {
		return nil, err
	}
	ad, err := lora.LoadPEFT(e.sys.env.Volume.WeightsDir(j.RunID, j.Version), eng.Config())
	if err != nil {
		return nil, fmt.Errorf("load weight version %d of %s: %w", j.Version, j.RunID, err)
	}
	e.drop(j.SamplerID) // the version it held before
	need := adapterBytes(eng.Config(), ad.Cfg)
	if !e.sys.mem.take(need) {
		e.trimIdle(j.SamplerID)
		if !e.sys.mem.take(need) {
			e.short()
			return nil, errNoRoom
		}
	}
	h := &heldAdapter{version: j.Version, engine: eng, adapter: eng.Freeze(ad), bytes: need}
	e.held[j.SamplerID] = h
	return h, nil
}

// sampleResult is the result of sample; logprobsResult of logprobs.
type sampleResult struct {
	*sampler.Result
	WeightVersion int64 `json:"weight_version"`
}

type logprobsResult struct {
	Logprobs      []*float64 `json:"logprobs"`
	WeightVersion int64      `json:"weight_version"`
}
