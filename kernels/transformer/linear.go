package transformer

import (
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
)

// weight is a matrix W [out, in] (row-major) as the products use it. Frozen
// float32 ones (base projections, a Frozen adapter's pairs) are also packed
// once as Wᵀ for the forward product and, for the LM head (re-used by every
// chunk of tokens), as W for the input gradient. Training's LoRA pairs and
// the float64 reference path have no packed copies.
type weight[F gemm.Float] struct {
	W      []F
	packed *gemm.Packed // B = Wᵀ
	grad   *gemm.Packed // B = W, or nil
}

// term is one module's LoRA pair as the products see it: A [r, in] and
// B [out, r] held as weights (packed when frozen for inference, see Frozen)
// and the scale s. The zero term (no pair) adds nothing.
type term[F gemm.Float] struct {
	a, b weight[F]
	s    F
}

// termOf wraps a pair of ad for training, where the pair changes every step
// and so is never packed.
func termOf[F gemm.Float](ad *lora.Adapter[F], p *lora.Pair[F]) term[F] {
	if p == nil {
		return term[F]{}
	}
	return term[F]{a: weight[F]{W: p.A}, b: weight[F]{W: p.B}, s: ad.Scale()}
}

// newWeight wraps W [out, in]; for float32 it is also packed as Wᵀ.
func newWeight[F gemm.Float](W []F, out, in int) weight[F] {
	w := weight[F]{W: W}
	if w32, ok := any(W).([]float32); ok {
		w.packed = gemm.PackT(w32, out, in, in)
	}
	return w
}

// mul computes y = alpha·x·Wᵀ + beta·y for x [T, in], y [T, out].
func (w weight[F]) mul(y, x []F, T, in, out int, alpha, beta F) {
	if w.packed != nil {
		w.packed.Mul(false, T, any(alpha).(float32), any(x).([]float32), in, any(beta).(float32), any(y).([]float32), out)
		return
	}
	gemm.Gemm(false, true, T, out, in, alpha, x, in, w.W, in, beta, y, out)
}

// linear computes y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ.
// x: [T, in]; W: [out, in]; b: [out] or nil; y: [T, out].
// u: [T, r] receives x·Aᵀ for the backward pass (unused for the zero term).
func linear[F gemm.Float](y, x []F, T, in, out int, w weight[F], b []F, lt term[F], u []F) {
	w.mul(y, x, T, in, out, 1, 0)
	if b != nil {
		for t := 0; t < T; t++ {
			row := y[t*out : (t+1)*out]
			for j := range row {
				row[j] += b[j]
			}
		}
	}
	if lt.a.W != nil {
		r := len(lt.a.W) / in
		lt.a.mul(u, x, T, in, r, 1, 0)
		lt.b.mul(y, u, T, r, out, lt.s, 1)
	}
}

// rowGroup gives rows [lo, hi) of a batch their adapter (nil: the base
// model): a batch of sequences from several samplers over one base model
// runs every base product once for all its rows, and each adapter's LoRA
// terms on its own rows.
type rowGroup[F gemm.Float] struct {
	z      *Frozen[F]
	lo, hi int
}

// groupRows groups consecutive rows that share an adapter.
func groupRows[F gemm.Float](zs []*Frozen[F]) []rowGroup[F] {
	var gs []rowGroup[F]
	for i, z := range zs {
		if n := len(gs); n > 0 && gs[n-1].z == z {
			gs[n-1].hi = i + 1
			continue
		}
		gs = append(gs, rowGroup[F]{z, i, i + 1})
	}
	return gs
}

// maxRank is the largest adapter rank among the groups (the LoRA scratch
// holds T rows of it).
func maxRank[F gemm.Float](gs []rowGroup[F]) int {
	r := 0
	for _, g := range gs {
		r = max(r, g.z.rank())
	}
	return r
}

// linearRows is linear over rows whose LoRA terms differ by group: the base
// product (and bias) for all T rows at once, then each group's term, taken
// from its adapter by termOf, on that group's rows among [t0, t0+T).
// x: [T, in]; y: [T, out]; u: scratch of at least T·maxRank.
func linearRows[F gemm.Float](y, x []F, T, in, out int, w weight[F], b []F, gs []rowGroup[F], t0 int, termOf func(*Frozen[F]) term[F], u []F) {
	linear(y, x, T, in, out, w, b, term[F]{}, nil)
	for _, g := range gs {
		lo, hi := max(g.lo, t0)-t0, min(g.hi, t0+T)-t0
		lt := termOf(g.z)
		if lo >= hi || lt.a.W == nil {
			continue
		}
		n, r := hi-lo, len(lt.a.W)/in
		lt.a.mul(u[:n*r], x[lo*in:hi*in], n, in, r, 1, 0)
		lt.b.mul(y[lo*out:hi*out], u[:n*r], n, r, out, lt.s, 1)
	}
}

// linearBackward adds dL/dx into dx (skipped when dx is nil) and, when the
// module has a LoRA term, dL/dA and dL/dB into gp. W and b are frozen.
//
//	dB += s·dyᵀ·u    [out, r]
//	du  = s·dy·B     [T, r]
//	dA += duᵀ·x      [r, in]
//	dx += dy·W + du·A
func linearBackward[F gemm.Float](dx, dy, x []F, T, in, out int, w weight[F], lt term[F], gp *lora.Pair[F], u []F, ar *Arena[F]) {
	switch {
	case dx == nil:
	case w.grad != nil:
		w.grad.Mul(false, T, 1, any(dy).([]float32), out, 1, any(dx).([]float32), in)
	default:
		gemm.Gemm(false, false, T, in, out, 1, dy, out, w.W, in, 1, dx, in)
	}
	if lt.a.W == nil {
		return
	}
	A, B, s := lt.a.W, lt.b.W, lt.s
	r := len(A) / in
	du := ar.Alloc(T * r)
	gemm.Gemm(false, false, T, r, out, s, dy, out, B, r, 0, du, r)
	if gp != nil {
		gemm.Gemm(true, false, out, r, T, s, dy, out, u, r, 1, gp.B, r)
		gemm.Gemm(true, false, r, in, T, 1, du, r, x, in, 1, gp.A, in)
	}
	if dx != nil {
		gemm.Gemm(false, false, T, in, r, 1, du, r, A, in, 1, dx, in)
	}
}
