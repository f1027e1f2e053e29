package train

import (
	"context"
	"fmt"
	"math"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/transformer"
)

// Trainer is one run's training state on a shared base model: the adapter,
// the gradient accumulated since the last optimiser step, and AdamW's
// moments. It is not safe for concurrent use; a run applies its primitives
// one at a time, in order.
type Trainer struct {
	model   *transformer.Model[float32]
	adapter *lora.Adapter[float32]
	grads   *lora.Adapter[float32]
	pending int // forward_backward calls folded into grads
	opt     *optim.State
	arena   *transformer.Arena[float32] // activation buffers, reused every call
}

// NewTrainer starts training adapter ad on model m.
func NewTrainer(m *transformer.Model[float32], ad *lora.Adapter[float32]) *Trainer {
	return &Trainer{model: m, adapter: ad, grads: ad.ZerosLike(), opt: optim.NewState(sizes(ad)), arena: transformer.NewArena[float32]()}
}

func sizes(ad *lora.Adapter[float32]) []int {
	var s []int
	for _, p := range ad.Params() {
		s = append(s, len(p.Data))
	}
	return s
}

// UseArena makes the trainer's passes take their buffers from ar instead of
// its own arena. A caller that runs many trainers one at a time (the
// service's executor) gives them one: activation memory then follows the
// work in progress, not the number of runs (an arena keeps the largest
// batch it served, well over 100 MB for 4×128 tokens of the small model),
// and the buffers stay warm in the caches from one run's job to the next.
func (t *Trainer) UseArena(ar *transformer.Arena[float32]) { t.arena = ar }

// Adapter is the live adapter. Samplers must Clone it, not hold it.
func (t *Trainer) Adapter() *lora.Adapter[float32] { return t.adapter }

// Model is the base model.
func (t *Trainer) Model() *transformer.Model[float32] { return t.model }

// Steps is the number of optimiser steps taken.
func (t *Trainer) Steps() int { return t.opt.Step }

// PendingGradients is the number of forward_backward calls since the last step.
func (t *Trainer) PendingGradients() int { return t.pending }

// Forward computes losses and logprobs without touching any state.
func (t *Trainer) Forward(ctx context.Context, data []Datum, lossName string, config map[string]float64) (*Output, error) {
	return t.run(ctx, data, lossName, config, false)
}

// ForwardBackward computes losses and logprobs and adds the gradient into the
// accumulator. The gradient is computed apart and checked first: a NaN or Inf
// anywhere refuses the call and leaves the accumulator as it was.
func (t *Trainer) ForwardBackward(ctx context.Context, data []Datum, lossName string, config map[string]float64) (*Output, error) {
	return t.run(ctx, data, lossName, config, true)
}

func (t *Trainer) run(ctx context.Context, data []Datum, lossName string, config map[string]float64, backward bool) (*Output, error) {
	p, err := t.Begin(data, lossName, config, backward)
	if err != nil {
		return nil, err
	}
	for !p.Done() {
		if err := p.Next(ctx); err != nil {
			return nil, err
		}
	}
	return p.Output()
}

// Pass is a Forward or ForwardBackward in progress, run one micro-batch
// (at most MicroTokens tokens) per Next. Between two calls nothing of it is
// in the trainer's arena, so a scheduler may run other trainers' passes on
// the same arena in between: a large batch then shares the device with
// small ones instead of holding it until it ends.
type Pass struct {
	t        *Trainer
	e        *eval[float32]
	backward bool
	g        *lora.Adapter[float32] // the batch's gradient, apart from the accumulator
}

// Begin checks a batch and starts its pass; nothing is computed yet.
func (t *Trainer) Begin(data []Datum, lossName string, config map[string]float64, backward bool) (*Pass, error) {
	fn, err := loss.New(lossName, config)
	if err != nil {
		return nil, err
	}
	p := &Pass{t: t, backward: backward}
	if backward {
		p.g = t.adapter.ZerosLike()
	}
	if p.e, err = newEval(t.model, t.adapter, data, fn, p.g); err != nil {
		return nil, err
	}
	return p, nil
}

// Done reports whether every micro-batch has run.
func (p *Pass) Done() bool { return p.e.done() }

// Next runs the next micro-batch; a cancelled ctx stops it first.
func (p *Pass) Next(ctx context.Context) error { return p.e.next(ctx, p.t.arena) }

// NextTokens is the number of tokens Next would run.
func (p *Pass) NextTokens() int {
	_, n := p.e.span()
	return n
}

// Shares reports whether q can run its next micro-batch in one pass with
// p's (NextShared): the same base model, the same kind, neither done.
func (p *Pass) Shares(q *Pass) bool {
	return p.t.model == q.t.model && p.backward == q.backward && !p.Done() && !q.Done()
}

// NextShared runs the next micro-batch of each of ps, which must all share
// with the first (Shares), in one pass through their base model on the
// first's arena: every base product once for all their rows, each run's
// adapter on its own rows. Each pass's logprobs, losses and gradient are
// the ones its own Next gives, bit for bit, so a run's results do not
// depend on which other runs' work shared its passes (a rebuilt trainer
// replays its operations alone). ctxs[i] is ps[i]'s: a cancelled one stops
// them all before anything runs.
func NextShared(ctxs []context.Context, ps []*Pass) error {
	es := make([]*eval[float32], len(ps))
	for i, p := range ps {
		if !ps[0].Shares(p) {
			return fmt.Errorf("train: a shared pass of passes over other models, of other kinds, or done")
		}
		es[i] = p.e
	}
	return nextShared(ctxs, es, ps[0].t.arena)
}

// Output ends a done pass: its losses and logprobs, and for a
// forward_backward the gradient, checked and added to the accumulator.
func (p *Pass) Output() (*Output, error) {
	out, err := p.e.output()
	if err != nil || !p.backward {
		return out, err
	}
	t := p.t
	gp, acc := p.g.Params(), t.grads.Params()
	var sq float64
	for _, q := range gp {
		for _, v := range q.Data {
			sq += float64(v) * float64(v)
		}
	}
	if math.IsNaN(sq) || math.IsInf(sq, 0) {
		return nil, fmt.Errorf("%w: gradient of this batch", kerr.ErrNonFinite)
	}
	for i, q := range gp {
		dst := acc[i].Data
		for j, v := range q.Data {
			dst[j] += v
		}
	}
	t.pending++
	out.Metrics["grad_norm:batch"] = math.Sqrt(sq)
	return out, nil
}

// OptimStep applies AdamW with the accumulated gradient and clears it. On an
// error (bad parameters, a non-finite gradient) the adapter, the moments and
// the accumulator are unchanged.
func (t *Trainer) OptimStep(p optim.Params) (optim.Metrics, error) {
	params, grads := t.adapter.Params(), t.grads.Params()
	pw, gw := make([][]float32, len(params)), make([][]float32, len(params))
	for i := range params {
		pw[i], gw[i] = params[i].Data, grads[i].Data
	}
	m, err := t.opt.Update(pw, gw, p)
	if err != nil {
		return m, err
	}
	for _, g := range grads {
		clear(g.Data)
	}
	t.pending = 0
	return m, nil
}
