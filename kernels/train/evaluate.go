// Package train runs the training primitives on a base model and a LoRA
// adapter: forward (loss and logprobs), forward_backward (gradients that
// accumulate until the optimiser step), optim_step (AdamW), and the trainer
// state a checkpoint holds.
package train

import (
	"context"
	"fmt"
	"math"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/transformer"
)

// Datum is one training sequence: the model input and the loss inputs aligned
// with it (position i of the loss inputs scores the prediction made at input
// position i, usually of input token i+1).
type Datum struct {
	ModelInput []int
	Loss       loss.Inputs
}

// Output is what forward and forward_backward return.
type Output struct {
	Logprobs [][]float64 // per datum, per position: logprob of the target token
	Losses   []float64   // per datum: the summed loss
	Metrics  map[string]float64
}

// MicroTokens bounds the tokens in one pass through the model. Activations
// grow with tokens × layers; larger batches run as several passes whose
// gradients add up, which gives the same result. Shared passes of several
// runs (NextShared) keep to it too, by their caller.
const MicroTokens = 4096

// Validate checks a batch against the model and the loss before any compute.
func Validate(data []Datum, fn *loss.Fn, vocab, maxPos int) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: no datums", kerr.ErrEmptyInput)
	}
	for i := range data {
		d := &data[i]
		n := len(d.ModelInput)
		if n == 0 {
			return fmt.Errorf("%w: datum %d has no tokens", kerr.ErrEmptyInput, i)
		}
		if n > maxPos {
			return fmt.Errorf("%w: datum %d has %d tokens, context is %d", kerr.ErrTooLong, i, n, maxPos)
		}
		if err := fn.Check(&d.Loss, n); err != nil {
			return fmt.Errorf("datum %d: %w", i, err)
		}
		for _, toks := range [][]int{d.ModelInput, d.Loss.TargetTokens} {
			for _, t := range toks {
				if t < 0 || t >= vocab {
					return fmt.Errorf("%w: datum %d has token %d, vocabulary is [0, %d)", kerr.ErrTokenRange, i, t, vocab)
				}
			}
		}
	}
	return nil
}

// Evaluate computes each datum's target logprobs and loss, and when grads is
// non-nil adds dL/d(adapter) into it, where L is the loss summed over all
// tokens of all datums. Buffers come from ar (nil allocates); it is reset.
// A cancelled ctx stops it between micro-batches with ctx's error (grads
// then holds part of the batch: Trainer computes into a scratch buffer).
func Evaluate[F gemm.Float](ctx context.Context, m *transformer.Model[F], ad *lora.Adapter[F], data []Datum, fn *loss.Fn, grads *lora.Adapter[F], ar *transformer.Arena[F]) (*Output, error) {
	e, err := newEval(m, ad, data, fn, grads)
	if err != nil {
		return nil, err
	}
	for !e.done() {
		if err := e.next(ctx, ar); err != nil {
			return nil, err
		}
	}
	return e.output()
}

// eval is an Evaluate in progress: it runs one micro-batch per next, and
// between two of them nothing of it is in the arena, so that other work
// may use the arena in the meantime (Pass).
type eval[F gemm.Float] struct {
	m          *transformer.Model[F]
	ad         *lora.Adapter[F]
	data       []Datum
	fn         *loss.Fn
	grads      *lora.Adapter[F]
	out        *Output
	tokLoss    [][]float64 // per token, summed per datum at the end in order
	lo         int         // the first datum not yet evaluated
	tokensDone int         // tokens evaluated
	total      int
}

func newEval[F gemm.Float](m *transformer.Model[F], ad *lora.Adapter[F], data []Datum, fn *loss.Fn, grads *lora.Adapter[F]) (*eval[F], error) {
	c := m.Cfg()
	if err := Validate(data, fn, c.Vocab, c.MaxPos); err != nil {
		return nil, err
	}
	e := &eval[F]{m: m, ad: ad, data: data, fn: fn, grads: grads,
		out: &Output{Logprobs: make([][]float64, len(data)), Losses: make([]float64, len(data))}, tokLoss: make([][]float64, len(data))}
	for i := range data {
		e.out.Logprobs[i] = make([]float64, len(data[i].ModelInput))
		e.tokLoss[i] = make([]float64, len(data[i].ModelInput))
		e.total += len(data[i].ModelInput)
	}
	return e, nil
}

func (e *eval[F]) done() bool { return e.lo == len(e.data) }

// span is the next micro-batch: datums [lo, hi) while they fit in
// MicroTokens (at least one), n tokens.
func (e *eval[F]) span() (hi, n int) {
	hi = e.lo
	for hi < len(e.data) && (hi == e.lo || n+len(e.data[hi].ModelInput) <= MicroTokens) {
		n += len(e.data[hi].ModelInput)
		hi++
	}
	return hi, n
}

// next evaluates the next micro-batch.
func (e *eval[F]) next(ctx context.Context, ar *transformer.Arena[F]) error {
	return nextShared([]context.Context{ctx}, []*eval[F]{e}, ar)
}

// nextShared evaluates the next micro-batch of each of es, which share a
// base model and are all forward or all forward_backward (Pass.Shares), in one pass
// through it (transformer.ForwardGroups): each gets the results its own
// pass would give, bit for bit. ctxs[i] is es[i]'s: a cancelled one stops
// them all before anything runs; each hears of its own progress.
func nextShared[F gemm.Float](ctxs []context.Context, es []*eval[F], ar *transformer.Arena[F]) error {
	for _, ctx := range ctxs {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	m, backward := es[0].m, es[0].grads != nil
	his, ns := make([]int, len(es)), make([]int, len(es))
	gs := make([]transformer.Group[F], len(es))
	var seqs [][]int
	for k, e := range es {
		his[k], ns[k] = e.span()
		for _, d := range e.data[e.lo:his[k]] {
			seqs = append(seqs, d.ModelInput)
		}
		gs[k] = transformer.Group[F]{Adapter: e.ad, Grads: e.grads, Seqs: his[k] - e.lo}
	}
	ar.Reset() // the previous micro-batch's activations are dead
	if err := evalMicro(m, es, his, transformer.Pack(seqs), gs, backward, ar); err != nil {
		return err
	}
	for k, e := range es {
		e.tokensDone += ns[k]
		progress(ctxs[k], e.tokensDone, e.total)
		e.lo = his[k]
	}
	return nil
}

// output sums the losses once every micro-batch is done.
func (e *eval[F]) output() (*Output, error) {
	var sum float64
	var ntok int
	for i, ls := range e.tokLoss {
		for _, v := range ls {
			e.out.Losses[i] += v
		}
		sum += e.out.Losses[i]
		ntok += len(ls)
	}
	if math.IsNaN(sum) || math.IsInf(sum, 0) {
		return nil, fmt.Errorf("%w: loss:sum is %v", kerr.ErrNonFinite, sum)
	}
	e.out.Metrics = map[string]float64{"loss:sum": sum, "tokens:sum": float64(ntok), "datums:sum": float64(len(e.data))}
	return e.out, nil
}

// evalMicro runs datums [lo, hi) of each of es (his[k] is es[k]'s hi),
// packed in b with their adapters gs, through the model and the loss.
func evalMicro[F gemm.Float](m *transformer.Model[F], es []*eval[F], his []int, b transformer.Batch, gs []transformer.Group[F], backward bool, ar *transformer.Arena[F]) error {
	act, err := m.ForwardGroups(gs, b, ar, backward)
	if err != nil {
		return err
	}
	T := len(b.Tokens)
	// owner[t] maps a packed position back to (eval, datum, position).
	type at struct{ e, d, i int }
	owner := make([]at, T)
	s := 0
	for k, e := range es {
		for d := e.lo; d < his[k]; d, s = d+1, s+1 {
			for t := b.Starts[s]; t < b.Starts[s+1]; t++ {
				owner[t] = at{k, d, t - b.Starts[s]}
			}
		}
	}
	var dHidden []F
	if backward {
		dHidden = ar.Alloc(T * m.Cfg().Hidden)
	}
	// Head calls the row function concurrently; each call writes only its
	// own (datum, position) slots.
	m.Head(act, dHidden, func(t int, row []F) bool {
		o := owner[t]
		e, d, i := es[o.e], o.d, o.i
		in := &e.data[d].Loss
		target := in.TargetTokens[i]
		if !backward {
			lp := transformer.TargetLogprob(row, target)
			e.out.Logprobs[d][i] = lp
			e.tokLoss[d][i], _ = e.fn.Token(in, i, lp)
			return false
		}
		var g float64
		lp := transformer.LogprobGrad(row, target, func(lp float64) float64 {
			e.tokLoss[d][i], g = e.fn.Token(in, i, lp)
			return g
		})
		e.out.Logprobs[d][i] = lp
		return g != 0
	})
	if backward {
		m.Backward(act, dHidden)
	}
	return nil
}
