package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/actors/wire"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

// samplingExecutor runs the samplers of this node: never on the trainer's
// executor, so sampling never waits behind a training step. It holds each
// sampler's adapter at one weight version beside the shared base model;
// a sampler released for idleness drops its adapter, and the next job loads
// it again.
type samplingExecutor struct {
	sys  *System
	jobs chan func()
	done chan struct{}

	// Owned by the worker goroutine.
	held map[string]*heldAdapter // sampler id → its adapter in memory
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
	e := &samplingExecutor{sys: s, jobs: make(chan func(), 1024), done: make(chan struct{}), held: map[string]*heldAdapter{}}
	go func() {
		defer close(e.done)
		for fn := range e.jobs {
			fn()
		}
	}()
	return e
}

// Receive takes the sampler grains' commands.
func (e *samplingExecutor) Receive(ctx actor.Context) {
	c, ok := ctx.Message().(*wire.Call)
	if !ok {
		return
	}
	switch c.Method {
	case "samp.job":
		j, err := decode[samplingJob](c.Body)
		if err != nil {
			e.sys.log.Error("sampling command", "err", err)
			return
		}
		e.jobs <- func() { e.run(j) }
	case "samp.release":
		r, err := decode[jobRef](c.Body)
		if err == nil {
			e.jobs <- func() { delete(e.held, r.RunID) } // RunID carries the sampler id
		}
	}
}

// stop finishes the queued jobs.
func (e *samplingExecutor) stop() {
	close(e.jobs)
	<-e.done
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

func (e *samplingExecutor) run(j *samplingJob) {
	start := time.Now()
	h, err := e.adapter(j)
	if j.Kind == "" {
		rep := synced{Epoch: j.Epoch, Version: j.Version}
		if err != nil {
			f := failure(context.Background(), err)
			rep.Code, rep.Message = f.Code, f.Message
		}
		e.sys.tell(samplerKind, j.SamplerID, "sampler.synced", rep)
		return
	}
	var d *done
	if err == nil {
		d, err = e.sample(h, j)
	}
	if err != nil {
		d = failure(context.Background(), err)
	}
	took := time.Since(start)
	d.Epoch, d.SeqID, d.DurationMS = j.Epoch, j.SeqID, float64(took.Microseconds())/1000
	e.sys.cfg.Metrics.Executed(j.Kind, d.Status, took)
	method := "sampler.exec_done"
	if j.ReplyKind == runKind {
		method = "run.exec_done"
	}
	e.sys.tell(j.ReplyKind, j.ReplyID, method, d)
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

func (e *samplingExecutor) sample(h *heldAdapter, j *samplingJob) (*done, error) {
	p, err := payload.Parse(j.Kind, j.Payload)
	if err != nil {
		return nil, err
	}
	var res any
	var tokens int64
	switch p := p.(type) {
	case *payload.SamplePayload:
		out, err := sampler.Sample(h.model, h.frozen, p.Request())
		if err != nil {
			return nil, err
		}
		tokens = int64(len(p.Prompt.TokenIDs))
		for _, s := range out.Sequences {
			tokens += int64(len(s.Tokens))
		}
		res = sampleResult{out, j.Version}
	case *payload.LogprobsPayload:
		lps, err := sampler.Logprobs(h.model, h.frozen, p.Input.TokenIDs)
		if err != nil {
			return nil, err
		}
		tokens = int64(len(p.Input.TokenIDs))
		res = logprobsResult{lps, j.Version}
	default:
		return nil, fmt.Errorf("sampler: no primitive for %s", j.Kind)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &done{Status: OpSucceeded, Result: raw, Tokens: tokens}, nil
}
