package ops

import "math"

// The reference definitions: direct transcriptions of the math in float64,
// with no blocking, no saved statistics and no parallelism. Tests hold the
// fast versions to these.

// RefRMSNorm returns x[t]/sqrt(mean(x[t]²)+eps) ⊙ w. x: [T, D].
func RefRMSNorm(x, w []float64, T, D int, eps float64) []float64 {
	y := make([]float64, T*D)
	for t := 0; t < T; t++ {
		var ms float64
		for i := 0; i < D; i++ {
			ms += x[t*D+i] * x[t*D+i]
		}
		ms /= float64(D)
		for i := 0; i < D; i++ {
			y[t*D+i] = x[t*D+i] / math.Sqrt(ms+eps) * w[i]
		}
	}
	return y
}

// RefRope rotates every head of x ([T, H*hd]) by position·invFreq,
// rotate-half layout.
func RefRope(x []float64, positions []int, invFreq []float64, H int) []float64 {
	half := len(invFreq)
	hd := 2 * half
	y := append([]float64(nil), x...)
	for t, p := range positions {
		for h := 0; h < H; h++ {
			base := (t*H + h) * hd
			for i := 0; i < half; i++ {
				ang := float64(p) * invFreq[i]
				x1, x2 := x[base+i], x[base+i+half]
				y[base+i] = x1*math.Cos(ang) - x2*math.Sin(ang)
				y[base+i+half] = x2*math.Cos(ang) + x1*math.Sin(ang)
			}
		}
	}
	return y
}

// RefAttention is causal GQA attention written as softmax(q·kᵀ/√hd)·v per
// head. Shapes as in Attention.
func RefAttention(q, k, v []float64, T, S, Hq, Hkv, hd int) []float64 {
	out := make([]float64, T*Hq*hd)
	for h := 0; h < Hq; h++ {
		g := h / (Hq / Hkv)
		for t := 0; t < T; t++ {
			valid := S - T + t + 1
			scores := make([]float64, valid)
			mx := math.Inf(-1)
			for s := 0; s < valid; s++ {
				var d float64
				for i := 0; i < hd; i++ {
					d += q[t*Hq*hd+h*hd+i] * k[s*Hkv*hd+g*hd+i]
				}
				scores[s] = d / math.Sqrt(float64(hd))
				mx = math.Max(mx, scores[s])
			}
			var z float64
			for s := range scores {
				scores[s] = math.Exp(scores[s] - mx)
				z += scores[s]
			}
			for s := range scores {
				for i := 0; i < hd; i++ {
					out[t*Hq*hd+h*hd+i] += scores[s] / z * v[s*Hkv*hd+g*hd+i]
				}
			}
		}
	}
	return out
}

// RefSwiGLU returns g·sigmoid(g)·u elementwise.
func RefSwiGLU(g, u []float64) []float64 {
	a := make([]float64, len(g))
	for i := range g {
		a[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return a
}
