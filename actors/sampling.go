package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/par"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

// samplingExecutor runs the samplers of this node: never on the trainer's
// executor, so sampling never waits behind a training step. It holds each
// sampler's adapter at one weight version beside the shared base model;
// a sampler released for idleness drops its adapter, and the next job loads
// it again.
//
// Sample requests decode together (continuous batching): every step of its
// worker advances every request in flight, of every sampler on the same
// base model, by one token in one batched pass (sampler.Step), and a
// request that arrives joins at the next step.
type samplingExecutor struct {
	sys  *System
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
	cancelled map[samplingRef]time.Time
}

// cancelKeep is how long a cancel waits for its job to arrive.
const cancelKeep = 10 * time.Minute

// samplingCmd is a job, or (release set) the release of a sampler's
// adapter, or (cancel set) the cancel of a job.
type samplingCmd struct {
	job     *samplingJob
	release string
	cancel  *samplingRef
}

// samplingRef names a sampling job by the grain that hears its outcome and
// its operation's seq_id there.
type samplingRef struct {
	ReplyKind, ReplyID string
	SeqID              int64
}

func (j *samplingJob) ref() samplingRef { return samplingRef{j.ReplyKind, j.ReplyID, j.SeqID} }

// flight is a sample request, from its start to its last token.
type flight struct {
	job       *samplingJob
	held      *heldAdapter
	req       sampler.Request
	stream    *sampler.Stream // once started
	start     time.Time
	cancelled bool // its operation was cancelled: it ends at the next step
}

// heldAdapter is a sampler's adapter, prepared for decoding.
type heldAdapter struct {
	version int64
	model   *transformer.Model[float32]
	frozen  *transformer.Frozen[float32]
}

// samplingJob is one piece of sampler work: a sync (Kind empty: load the
// weight version), or a sample or logprobs operation at that version.
// ReplyKind and ReplyID name the grain that hears the outcome: the sampler,
// or for a run-scoped sample the run.
type samplingJob struct {
	SamplerID string
	RunID     string
	BaseModel string
	Version   int64
	Epoch     uint64
	SeqID     int64
	Kind      string
	Payload   json.RawMessage
	ReplyKind string
	ReplyID   string
}

// synced is the sampling executor's report on a sync.
type synced struct {
	Epoch   uint64
	Version int64
	Code    string
	Message string
}

func newSamplingExecutor(s *System) *samplingExecutor {
	e := &samplingExecutor{sys: s, cmds: newInbox[samplingCmd](1024), done: make(chan struct{}), held: map[string]*heldAdapter{},
		cancelled: map[samplingRef]time.Time{}}
	go e.work()
	return e
}

// work takes commands and steps the requests in flight: when none is
// decoding it waits for a command; otherwise it takes whatever has arrived
// and decodes one more token for everything in flight. Stopping, it takes
// no new job and finishes the requests in flight, or at drain's deadline
// cuts them (each goes back to pending).
func (e *samplingExecutor) work() {
	defer close(e.done)
	par.EngineThread()
	ar := transformer.NewArena[float32]()
	open := true
	for open || len(e.flying)+len(e.starting) > 0 {
		if len(e.flying) == 0 && len(e.starting) == 0 {
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
			for _, f := range append(e.flying, e.starting...) {
				e.report(f.job, &done{Status: OpPending, Message: "cut short by the node's stop; it runs again after the next start"}, f.start)
			}
			return
		}
		e.launch()
		e.step(ar)
	}
}

// drain stops taking jobs and lets the requests in flight finish; when ctx
// ends first, they are cut.
func (e *samplingExecutor) drain(ctx context.Context) {
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
func (e *samplingExecutor) launch() {
	groups := byModel(e.starting, func(f *flight) *transformer.Model[float32] { return f.held.model })
	e.starting = e.starting[:0]
	for _, fs := range groups {
		var zs []*transformer.Frozen[float32]
		var qs []sampler.Request
		live := fs[:0]
		for _, f := range fs {
			if f.cancelled {
				e.report(f.job, &done{Status: OpCancelled, Code: CodeCancelled, Message: "cancelled before it started"}, f.start)
				continue
			}
			e.started(f.job)
			zs, qs, live = append(zs, f.held.frozen), append(qs, f.req), append(live, f)
		}
		if len(live) == 0 {
			continue
		}
		var streams []*sampler.Stream
		var errs []error
		err := guard(e.sys.log, "sampling prefill", func() error {
			streams, errs = sampler.StartMany(live[0].held.model, zs, qs)
			return nil
		})
		for i, f := range live {
			ferr := err
			if ferr == nil {
				ferr = errs[i]
			}
			if ferr != nil {
				e.report(f.job, failure(context.Background(), ferr), f.start)
				continue
			}
			f.stream = streams[i]
			e.flying = append(e.flying, f)
		}
	}
}

// started tells a sampler that its operation's work began (it marks it
// executing); a run-scoped sample's run operation is executing already.
func (e *samplingExecutor) started(j *samplingJob) {
	if j.ReplyKind == samplerKind {
		e.sys.report(samplerKind, j.ReplyID, "sampler.exec_started", started{Epoch: j.Epoch, SeqID: j.SeqID})
	}
}

// take carries out a command: a sync or a logprobs at once, a sample by
// joining the requests to start (launch prefills them together, and they
// join the requests in flight).
func (e *samplingExecutor) take(c samplingCmd) {
	switch {
	case c.release != "":
		delete(e.held, c.release)
		return
	case c.cancel != nil:
		found := false
		for _, f := range append(e.flying, e.starting...) {
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
	}
	j := c.job
	start := time.Now()
	if _, ok := e.cancelled[j.ref()]; ok && j.Kind != "" {
		delete(e.cancelled, j.ref())
		e.report(j, &done{Status: OpCancelled, Code: CodeCancelled, Message: "cancelled before it started"}, start)
		return
	}
	if err := guard(e.sys.log, "sampling "+j.Kind, func() error { e.start(j, start); return nil }); err != nil {
		e.report(j, failure(context.Background(), err), start)
	}
}

// start begins a job: a sync or a logprobs at once, a sample by joining
// the requests to launch.
func (e *samplingExecutor) start(j *samplingJob, start time.Time) {
	h, err := e.adapter(j)
	switch {
	case j.Kind == "":
		rep := synced{Epoch: j.Epoch, Version: j.Version}
		if err != nil {
			f := failure(context.Background(), err)
			rep.Code, rep.Message = f.Code, f.Message
		}
		e.sys.report(samplerKind, j.SamplerID, "sampler.synced", rep)
		return
	case err != nil:
		e.report(j, failure(context.Background(), err), start)
		return
	}
	p, err := payload.Parse(j.Kind, j.Payload)
	if err != nil {
		e.report(j, failure(context.Background(), err), start)
		return
	}
	switch p := p.(type) {
	case *payload.SamplePayload:
		e.starting = append(e.starting, &flight{job: j, held: h, req: p.Request(), start: start})
	case *payload.LogprobsPayload:
		e.started(j)
		lps, err := sampler.Logprobs(h.model, h.frozen, p.Input.TokenIDs)
		if err != nil {
			e.report(j, failure(context.Background(), err), start)
			return
		}
		e.report(j, succeeded(logprobsResult{lps, j.Version}, int64(len(p.Input.TokenIDs))), start)
	default:
		e.report(j, failure(context.Background(), fmt.Errorf("sampler: no primitive for %s", j.Kind)), start)
	}
}

// step decodes one token for every request in flight, one batched pass per
// base model, and reports the requests that finished. A group whose pass
// failed (a panic included) fails its requests only.
func (e *samplingExecutor) step(ar *transformer.Arena[float32]) {
	var streams []*sampler.Stream
	for _, f := range e.flying {
		if !f.stream.Done() && !f.cancelled {
			streams = append(streams, f.stream)
		}
	}
	failed := map[*transformer.Model[float32]]error{}
	for _, ss := range byModel(streams, (*sampler.Stream).Model) {
		if err := guard(e.sys.log, "sampling step", func() error { return sampler.Step(ss, ar) }); err != nil {
			failed[ss[0].Model()] = err
		}
	}
	left := e.flying[:0]
	for _, f := range e.flying {
		err := failed[f.stream.Model()]
		if err == nil {
			err = f.stream.Err()
		}
		switch {
		case f.cancelled:
			e.report(f.job, &done{Status: OpCancelled, Code: CodeCancelled, Message: "cancelled while executing"}, f.start)
		case err != nil:
			e.report(f.job, failure(context.Background(), err), f.start)
		case f.stream.Done():
			res := f.stream.Result()
			tokens := int64(len(f.req.Prompt)) // the prompt is metered with the generated tokens
			for _, s := range res.Sequences {
				tokens += int64(len(s.Tokens))
			}
			e.report(f.job, succeeded(sampleResult{res, f.job.Version}, tokens), f.start)
		default:
			left = append(left, f)
		}
	}
	clear(e.flying[len(left):])
	e.flying = left
}

// byModel groups items by their base model, in the order first seen.
func byModel[T any](items []T, model func(T) *transformer.Model[float32]) [][]T {
	index := map[*transformer.Model[float32]]int{}
	var groups [][]T
	for _, it := range items {
		m := model(it)
		k, seen := index[m]
		if !seen {
			k, index[m] = len(groups), len(groups)
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], it)
	}
	return groups
}

// succeeded is the outcome of a sampler operation with result res.
func succeeded(res any, tokens int64) *done {
	raw, err := json.Marshal(res)
	if err != nil {
		return failure(context.Background(), fmt.Errorf("encode result: %w", err))
	}
	return &done{Status: OpSucceeded, Result: raw, Tokens: tokens}
}

// report tells the job's grain how it ended.
func (e *samplingExecutor) report(j *samplingJob, d *done, start time.Time) {
	took := time.Since(start)
	d.Epoch, d.SeqID, d.DurationMS = j.Epoch, j.SeqID, float64(took.Microseconds())/1000
	e.sys.cfg.Metrics.Executed(j.Kind, d.Status, took)
	method := "sampler.exec_done"
	if j.ReplyKind == runKind {
		method = "run.exec_done"
	}
	e.sys.report(j.ReplyKind, j.ReplyID, method, d)
}

// Receive takes the sampler grains' commands.
func (e *samplingExecutor) Receive(ctx actor.Context) {
	method, in, _, ok := request(ctx.Message())
	if !ok {
		return
	}
	switch method {
	case "samp.job":
		j, err := decode[samplingJob](in)
		if err != nil {
			e.sys.log.Error("sampling command", "err", err)
			return
		}
		if !e.cmds.put(samplingCmd{job: j}) {
			// Stopping: the operation stays pending on disk and runs after
			// the next start.
			e.sys.log.Info("sampling job not started: the node is stopping", "sampler", j.SamplerID, "seq_id", j.SeqID)
		}
	case "samp.release":
		r, err := decode[jobRef](in)
		if err == nil {
			e.cmds.put(samplingCmd{release: r.RunID}) // RunID carries the sampler id
		}
	case "samp.cancel":
		r, err := decode[samplingRef](in)
		if err == nil {
			e.cmds.put(samplingCmd{cancel: r})
		}
	}
}

// adapter returns the sampler's adapter at version, loading it when the
// sampler holds another version or none.
func (e *samplingExecutor) adapter(j *samplingJob) (*heldAdapter, error) {
	if h := e.held[j.SamplerID]; h != nil && h.version == j.Version {
		return h, nil
	}
	m, err := e.sys.model(j.BaseModel)
	if err != nil {
		return nil, err
	}
	ad, err := lora.LoadPEFT(e.sys.volume.WeightsDir(j.RunID, j.Version), m.Cfg())
	if err != nil {
		return nil, fmt.Errorf("load weight version %d of %s: %w", j.Version, j.RunID, err)
	}
	h := &heldAdapter{version: j.Version, model: m, frozen: m.Freeze(ad)}
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
