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
func RMSNorm[F Float](y, inv, x, w []F, T, D int, eps float64) {
	par.For(T, 64, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			xr, yr := x[t*D:(t+1)*D], y[t*D:(t+1)*D]
			var ss float64
			for _, v := range xr {
				ss += float64(v) * float64(v)
			}
			r := F(1 / math.Sqrt(ss/float64(D)+eps))
			inv[t] = r
			for i, v := range xr {
				yr[i] = v * r * w[i]
			}
		}
	})
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

// SwiGLU: a = silu(g) ⊙ u. g, u, a: [T, I] flattened to n values.
func SwiGLU[F Float](a, g, u []F) {
	par.For(len(a), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			a[i] = silu(g[i]) * u[i]
		}
	})
}

// SwiGLUBackward adds into dg and du given da.
func SwiGLUBackward[F Float](dg, du, da, g, u []F) {
	par.For(len(da), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := sigmoid(g[i])
			du[i] += da[i] * g[i] * s
			dg[i] += da[i] * u[i] * s * (1 + g[i]*(1-s))
		}
	})
}

func sigmoid[F Float](x F) F { return F(1 / (1 + math.Exp(-float64(x)))) }

func silu[F Float](x F) F { return x * sigmoid(x) }

// LogSumExp of a row, stable: max + log Σ exp(x − max), summed in float64.
func LogSumExp[F Float](row []F) float64 {
	mx := float64(row[0])
	for _, v := range row[1:] {
		mx = max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(s)
}
