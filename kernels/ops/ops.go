// Package ops holds the transformer's layer operations, each as a forward and
// a backward pair (llm.c style: backward functions add into their gradient
// outputs). Shapes are given in comments as [rows, cols] of row-major slices;
// T is tokens, D the model width, H heads, hd the head width.
//
// The functions here are the fast versions used in service; ref.go holds the
// plain definitions they are tested against.
package ops

import (
	"math"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/par"
)

// Float is the element type: float32 in service, float64 for gradient checks.
type Float = gemm.Float

// RMSNorm: y[t] = x[t] · inv[t] · w with inv[t] = 1/sqrt(mean(x[t]²) + eps).
// x, y: [T, D]; w: [D]; inv: [T] (saved for the backward pass).
//
// For float32 both passes over a row run on the vector unit (the sum of
// squares still in float64): the scalar loops, run many times a decode
// step, were a visible share of it, and of the tiny model's forward
// (BenchmarkRMSNorm).
func RMSNorm[F Float](y, inv, x, w []F, T, D int, eps float64) {
	if !par.Splits(T, 64) {
		rmsRows(y, inv, x, w, D, eps, 0, T)
		return
	}
	par.For(T, 64, func(lo, hi int) { rmsRows(y, inv, x, w, D, eps, lo, hi) })
}

// rmsRows is RMSNorm of rows [lo, hi).
func rmsRows[F Float](y, inv, x, w []F, D int, eps float64, lo, hi int) {
	for t := lo; t < hi; t++ {
		xr, yr := x[t*D:(t+1)*D], y[t*D:(t+1)*D]
		body, ss := 0, 0.0
		if x32, ok := any(xr).([]float32); ok {
			body, ss = sumSquaresBody(x32)
		}
		for _, v := range xr[body:] {
			ss += float64(v) * float64(v)
		}
		r := F(1 / math.Sqrt(ss/float64(D)+eps))
		inv[t] = r
		body = 0
		if y32, ok := any(yr).([]float32); ok {
			body = scaleMulBody(y32, any(xr).([]float32), any(w).([]float32), any(r).(float32))
		}
		for i := body; i < D; i++ {
			yr[i] = xr[i] * r * w[i]
		}
	}
}

// Add adds src into dst (a residual connection). dst, src: same length.
// For float32 it is gemm's vector axpy with alpha 1, whose fused 1·x + y
// rounds once, as the plain sum does.
func Add[F Float](dst, src []F) {
	if d32, ok := any(dst).([]float32); ok {
		gemm.Axpy(1, any(src).([]float32), d32)
		return
	}
	for i := range dst {
		dst[i] += src[i]
	}
}

// RMSNormBackward adds dL/dx into dx given dy (the weight w is frozen).
// With g = w⊙dy: dx = inv·g − x·inv³·(x·g)/D.
func RMSNormBackward[F Float](dx, dy, x, w, inv []F, T, D int) {
	par.For(T, 64, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			xr, dyr, dxr := x[t*D:(t+1)*D], dy[t*D:(t+1)*D], dx[t*D:(t+1)*D]
			var dot float64
			for i, v := range xr {
				dot += float64(v) * float64(w[i]*dyr[i])
			}
			r := inv[t]
			c := F(dot/float64(D)) * r * r * r
			for i, v := range xr {
				dxr[i] += r*w[i]*dyr[i] - v*c
			}
		}
	})
}

// HeadNorm applies RMSNorm to each head of x in place (Qwen3's q_norm and
// k_norm), saving the pre-norm values in pre and the factors in inv.
// x, pre: [T, H*hd]; w: [hd]; inv: [T*H].
func HeadNorm[F Float](x, pre, inv, w []F, T, H, hd int, eps float64) {
	copy(pre, x[:T*H*hd])
	RMSNorm(x, inv, pre, w, T*H, hd, eps)
}

// vecChunk is the stack scratch of the elementwise kernels below: exp runs
// over a chunk at a time (vectorised), then plain loops finish the formula.
const vecChunk = 256

// sigmoidChunk sets s[i] = 1/(1+e^(−g[i])) for len(g) <= vecChunk.
func sigmoidChunk[F Float](s, g []F) {
	for i, v := range g {
		s[i] = -v
	}
	ExpSlice(s, s)
	for i := range g {
		s[i] = 1 / (1 + s[i])
	}
}

// withSigmoid hands fn each chunk of [lo, hi) with sigmoid(g) over it: the
// portable SwiGLU, for float64, machines without AVX2 and the vector
// kernels' tails.
func withSigmoid[F Float](g []F, lo, hi int, fn func(lo, hi int, s []F)) {
	if lo >= hi { // the vector kernels did it all; s below escapes to the heap
		return
	}
	var s [vecChunk]F
	for c := lo; c < hi; c += vecChunk {
		e := min(c+vecChunk, hi)
		sigmoidChunk(s[:e-c], g[c:e])
		fn(c, e, s[:e-c])
	}
}

// SwiGLU: a = silu(g) ⊙ u = g·sigmoid(g)·u. g, u, a: [T, I] flattened; a
// may alias g.
func SwiGLU[F Float](a, g, u []F) {
	if !par.Splits(len(g), 4096) {
		swigluRange(a, g, u, 0, len(g))
		return
	}
	par.For(len(g), 4096, func(lo, hi int) { swigluRange(a, g, u, lo, hi) })
}

// swigluRange is SwiGLU of elements [lo, hi).
func swigluRange[F Float](a, g, u []F, lo, hi int) {
	if a32, ok := any(a).([]float32); ok { // one AVX2 pass (swigluAVX)
		lo += swigluBody(a32[lo:hi], any(g).([]float32)[lo:hi], any(u).([]float32)[lo:hi])
	}
	withSigmoid(g, lo, hi, func(lo, hi int, s []F) {
		for i := lo; i < hi; i++ {
			a[i] = g[i] * s[i-lo] * u[i]
		}
	})
}

// SwiGLUBackward sets dg and du given da (each gate and up value feeds one
// activation only, so nothing is accumulated and they need no clearing).
func SwiGLUBackward[F Float](dg, du, da, g, u []F) {
	par.For(len(g), 4096, func(lo, hi int) {
		if dg32, ok := any(dg).([]float32); ok { // one AVX2 pass (swigluBackAVX)
			f := func(x []F) []float32 { return any(x).([]float32)[lo:hi] }
			lo += swigluBackBody(dg32[lo:hi], f(du), f(da), f(g), f(u))
		}
		withSigmoid(g, lo, hi, func(lo, hi int, sb []F) {
			for i := lo; i < hi; i++ {
				s := sb[i-lo]
				du[i] = da[i] * g[i] * s
				dg[i] = da[i] * u[i] * s * (1 + g[i]*(1-s))
			}
		})
	})
}

// LogSumExp of a row, stable: max + log Σ exp(x − max), summed in float64.
// The row is left as it was.
func LogSumExp[F Float](row []F) float64 {
	mx := maxOf(row)
	if math.IsInf(float64(mx), 0) || mx != mx {
		return float64(mx)
	}
	var buf [vecChunk]F
	var s float64
	for c := 0; c < len(row); c += vecChunk {
		s += expShiftSum(buf[:copy(buf[:], row[c:])], mx)
	}
	return float64(mx) + math.Log(s)
}

// ExpShifted sets row[i] = e^(row[i] − shift) in place: probabilities from
// logits and their log-sum-exp.
func ExpShifted[F Float](row []F, shift float64) {
	expShiftSum(row, F(shift))
}

// ExpFromMax sets row[i] = e^(row[i] − m), m the row's largest value, and
// returns the row's log-sum-exp (m + log Σ) and that sum: the softmax is
// row/sum. One pass of exp where LogSumExp then ExpShifted take two.
func ExpFromMax[F Float](row []F) (lse, sum float64) {
	mx := maxOf(row)
	sum = expShiftSum(row, mx)
	return float64(mx) + math.Log(sum), sum
}

// ScaledExps sets e[i] = e^((x[i] − m)·inv), m the largest x, and returns m
// and the sum of e, taken in float64: a sampler's probabilities at
// temperature 1/inv relative to the top token's. x is left as it was. As
// scalar loops over the vocabulary (the max, the scaling, the sum) these
// cost ~6 ns a token, 4% of a 16-stream decode step of the small model.
func ScaledExps[F Float](e, x []F, inv float64) (F, float64) {
	mx := maxOf(x)
	e = e[:len(x)]
	if inv == 1 {
		copy(e, x)
		return mx, expShiftSum(e, mx)
	}
	for i, v := range x {
		e[i] = F((float64(v) - float64(mx)) * inv)
	}
	return mx, expShiftSum(e, 0)
}

// Softmax turns row into probabilities in place.
func Softmax[F Float](row []F) { normalize(row) }

// normalize turns row into probabilities in place and returns the largest
// value it held and the sum of exp(v − that). The log-sum-exp is their
// log, which a caller that needs none skips: on short rows that log cost
// an eighth of attention.
func normalize[F Float](row []F) (F, float64) {
	if r, ok := any(row).([]float32); ok {
		if ok, mx, sum := softmaxBody(r); ok {
			return F(mx), sum
		}
	}
	mx := maxOf(row)
	sum := expShiftSum(row, mx)
	inv := F(1 / sum)
	for i := range row {
		row[i] *= inv
	}
	return mx, sum
}
