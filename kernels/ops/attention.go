package ops

import (
	"math"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/par"
)

// KVLayout is where attention finds keys and values: position s of KV head g
// starts at s·Row + g·Head. The projections give [S, Hkv·hd] rows (Row
// Hkv·hd, Head hd); a decode cache keeps each head's positions together.
type KVLayout struct{ Row, Head int }

// Attention is causal grouped-query attention over one sequence.
//
// q: [T, Hq*hd]; k, v: S positions of Hkv heads laid out as kv says;
// out: [T, Hq*hd]; lse: [Hq, T].
// Query t sits at absolute position S−T+t and sees keys 0..S−T+t (so S == T
// in training, and S > T when appending to a cache). Query head h reads kv
// head h/(Hq/Hkv). lse keeps each row's log-sum-exp so the backward pass can
// rebuild the probabilities instead of storing T×S of them per head.
func Attention[F Float](out, lse, q, k, v []F, T, S, Hq, Hkv, hd int, kv KVLayout) {
	Q, group := Hq*hd, Hq/Hkv
	scale := F(1 / math.Sqrt(float64(hd)))
	par.For(Hq, par.MinChunk(2*T*S*hd, 1), func(lo, hi int) { // q·kᵀ and p·v per head
		p := make([]F, T*S) // [T, S]
		for h := lo; h < hi; h++ {
			g := h / group
			gemm.Serial(false, true, T, S, hd, scale, q[h*hd:], Q, k[g*kv.Head:], kv.Row, 0, p, S)
			for t := 0; t < T; t++ {
				lse[h*T+t] = F(softmaxCausal(p[t*S:(t+1)*S], S-T+t+1))
			}
			gemm.Serial(false, false, T, hd, S, 1, p, S, v[g*kv.Head:], kv.Row, 0, out[h*hd:], Q)
		}
	})
}

// softmaxCausal turns row[:valid] into probabilities in place, zeroes the
// masked tail, and returns the log-sum-exp of the valid scores.
func softmaxCausal[F Float](row []F, valid int) float64 {
	l := LogSumExp(row[:valid])
	ExpShifted(row[:valid], l)
	clear(row[valid:])
	return l
}

// AttentionBackward sets dq, dk, dv to the gradients of Attention's inputs
// given dout (they need no clearing). Work is split by kv head so that the
// query heads sharing a kv head accumulate into dk and dv on one goroutine.
func AttentionBackward[F Float](dq, dk, dv, dout, q, k, v, out, lse []F, T, S, Hq, Hkv, hd int) {
	Q, KV, group := Hq*hd, Hkv*hd, Hq/Hkv
	scale := F(1 / math.Sqrt(float64(hd)))
	par.For(Hkv, par.MinChunk(5*group*T*S*hd, 1), func(lo, hi int) { // five products per query head
		p := make([]F, T*S)  // [T, S] probabilities
		dp := make([]F, T*S) // [T, S] their gradient, then the scores' gradient
		for g := lo; g < hi; g++ {
			for h := g * group; h < (g+1)*group; h++ {
				var acc F // dk and dv: the group's first head sets them, the others add
				if h > g*group {
					acc = 1
				}
				gemm.Serial(false, true, T, S, hd, scale, q[h*hd:], Q, k[g*hd:], KV, 0, p, S)
				for t := 0; t < T; t++ {
					row, valid := p[t*S:(t+1)*S], S-T+t+1
					ExpShifted(row[:valid], float64(lse[h*T+t]))
					clear(row[valid:])
				}
				// dv += Pᵀ·dout; dP = dout·vᵀ
				gemm.Serial(true, false, S, hd, T, 1, p, S, dout[h*hd:], Q, acc, dv[g*hd:], KV)
				gemm.Serial(false, true, T, S, hd, 1, dout[h*hd:], Q, v[g*hd:], KV, 0, dp, S)
				// dS = P ⊙ (dP − rowsum(P ⊙ dP)); that row sum equals dout·out.
				for t := 0; t < T; t++ {
					var d F
					do, o := dout[t*Q+h*hd:t*Q+(h+1)*hd], out[t*Q+h*hd:t*Q+(h+1)*hd]
					for i := range do {
						d += do[i] * o[i]
					}
					pr, dr := p[t*S:(t+1)*S], dp[t*S:(t+1)*S]
					for s := range dr {
						dr[s] = pr[s] * (dr[s] - d)
					}
				}
				// dq = scale·dS·k; dk += scale·dSᵀ·q
				gemm.Serial(false, false, T, hd, S, scale, dp, S, k[g*hd:], KV, 0, dq[h*hd:], Q)
				gemm.Serial(true, false, S, hd, T, scale, dp, S, q[h*hd:], Q, acc, dk[g*hd:], KV)
			}
		}
	})
}
