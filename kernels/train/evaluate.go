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

// microTokens bounds the tokens in one pass through the model. Activations
// grow with tokens × layers; larger batches run as several passes whose
// gradients add up, which gives the same result.
const microTokens = 4096

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

// next evaluates the next micro-batch: datums from lo while they fit in
// microTokens (at least one).
func (e *eval[F]) next(ctx context.Context, ar *transformer.Arena[F]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	hi, n := e.lo, 0
	for hi < len(e.data) && (hi == e.lo || n+len(e.data[hi].ModelInput) <= microTokens) {
		n += len(e.data[hi].ModelInput)
		hi++
	}
	ar.Reset() // the previous micro-batch's activations are dead
	if err := evalMicro(e.m, e.ad, e.data, e.lo, hi, e.fn, e.grads, ar, e.out, e.tokLoss); err != nil {
		return err
	}
	e.tokensDone += n
	progress(ctx, e.tokensDone, e.total)
	e.lo = hi
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

func evalMicro[F gemm.Float](m *transformer.Model[F], ad *lora.Adapter[F], data []Datum, lo, hi int, fn *loss.Fn, grads *lora.Adapter[F], ar *transformer.Arena[F], out *Output, tokLoss [][]float64) error {
	seqs := make([][]int, 0, hi-lo)
	for _, d := range data[lo:hi] {
		seqs = append(seqs, d.ModelInput)
	}
	b := transformer.Pack(seqs)
	pass := m.Forward
	if grads == nil {
		pass = m.Infer
	}
	act, err := pass(ad, b, ar)
	if err != nil {
		return err
	}
	T := len(b.Tokens)
	// owner[t] maps a packed position back to (datum, position).
	owner := make([][2]int, T)
	for s := 0; s+1 < len(b.Starts); s++ {
		for t := b.Starts[s]; t < b.Starts[s+1]; t++ {
			owner[t] = [2]int{lo + s, t - b.Starts[s]}
		}
	}
	var dHidden []F
	if grads != nil {
		dHidden = ar.Alloc(T * m.Cfg().Hidden)
	}
	// Head calls the row function concurrently; each call writes only its
	// own (datum, position) slots.
	m.Head(ad, grads, act.Hidden, T, dHidden, ar, func(t int, row []F) bool {
		d, i := owner[t][0], owner[t][1]
		in := &data[d].Loss
		target := in.TargetTokens[i]
		if grads == nil {
			lp := transformer.TargetLogprob(row, target)
			out.Logprobs[d][i] = lp
			tokLoss[d][i], _ = fn.Token(in, i, lp)
			return false
		}
		var g float64
		lp := transformer.LogprobGrad(row, target, func(lp float64) float64 {
			tokLoss[d][i], g = fn.Token(in, i, lp)
			return g
		})
		out.Logprobs[d][i] = lp
		return g != 0
	})
	if grads != nil {
		m.Backward(ad, grads, act, dHidden)
	}
	return nil
}
