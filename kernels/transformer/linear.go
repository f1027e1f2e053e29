package transformer

import (
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
)

// weight is a frozen projection: W [out, in] row-major, and for float32
// models the same matrix packed once as Wᵀ for the forward product and, for
// the LM head (re-used by every chunk of tokens), as W for the input
// gradient. The packed copies are nil on the float64 reference path.
type weight[F gemm.Float] struct {
	W      []F
	packed *gemm.Packed // B = Wᵀ
	grad   *gemm.Packed // B = W, or nil
}

// linear computes y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ.
// x: [T, in]; W: [out, in]; b: [out] or nil; y: [T, out]; p may be nil.
// u: [T, r] receives x·Aᵀ for the backward pass (unused when p is nil).
func linear[F gemm.Float](y, x []F, T, in, out int, w weight[F], b []F, p *lora.Pair[F], s F, u []F) {
	if w.packed != nil {
		w.packed.Mul(false, T, 1, any(x).([]float32), in, 0, any(y).([]float32), out)
	} else {
		gemm.Gemm(false, true, T, out, in, 1, x, in, w.W, in, 0, y, out)
	}
	if b != nil {
		for t := 0; t < T; t++ {
			row := y[t*out : (t+1)*out]
			for j := range row {
				row[j] += b[j]
			}
		}
	}
	if p != nil {
		r := len(p.A) / in
		gemm.Gemm(false, true, T, r, in, 1, x, in, p.A, in, 0, u, r)
		gemm.Gemm(false, true, T, out, r, s, u, r, p.B, r, 1, y, out)
	}
}

// linearBackward adds dL/dx into dx (skipped when dx is nil) and, when the
// module has a LoRA pair, dL/dA and dL/dB into gp. W and b are frozen.
//
//	dB += s·dyᵀ·u    [out, r]
//	du  = s·dy·B     [T, r]
//	dA += duᵀ·x      [r, in]
//	dx += dy·W + du·A
func linearBackward[F gemm.Float](dx, dy, x []F, T, in, out int, w weight[F], p, gp *lora.Pair[F], s F, u []F, ar *Arena[F]) {
	switch {
	case dx == nil:
	case w.grad != nil:
		w.grad.Mul(false, T, 1, any(dy).([]float32), out, 1, any(dx).([]float32), in)
	default:
		gemm.Gemm(false, false, T, in, out, 1, dy, out, w.W, in, 1, dx, in)
	}
	if p == nil {
		return
	}
	r := len(p.A) / in
	du := ar.Alloc(T * r)
	gemm.Gemm(false, false, T, r, out, s, dy, out, p.B, r, 0, du, r)
	if gp != nil {
		gemm.Gemm(true, false, out, r, T, s, dy, out, u, r, 1, gp.B, r)
		gemm.Gemm(true, false, r, in, T, 1, du, r, x, in, 1, gp.A, in)
	}
	if dx != nil {
		gemm.Gemm(false, false, T, in, r, 1, du, r, p.A, in, 1, dx, in)
	}
}
