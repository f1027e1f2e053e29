package ops

import (
	"math"
	"sync"
	"testing"

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
// rebuild the probabilities instead of storing T×S of them per head; a pass
// no backward follows gives nil.
func Attention[F Float](out, lse, q, k, v []F, T, S, Hq, Hkv, hd int, kv KVLayout) {
	chunk := par.MinChunk(2*T*S*hd, 1) // q·kᵀ and p·v per head
	if !par.Splits(Hq, chunk) {
		attendHeads(out, lse, q, k, v, T, S, Hq, Hkv, hd, kv, 0, Hq)
		return
	}
	par.For(Hq, chunk, func(lo, hi int) { attendHeads(out, lse, q, k, v, T, S, Hq, Hkv, hd, kv, lo, hi) })
}

// attendHeads is Attention for query heads [lo, hi).
func attendHeads[F Float](out, lse, q, k, v []F, T, S, Hq, Hkv, hd int, kv KVLayout, lo, hi int) {
	Q, group := Hq*hd, Hq/Hkv
	scale := F(1 / math.Sqrt(float64(hd)))
	buf := lend[F](min(T, causalBlock) * S)
	defer giveBack(buf)
	p := *buf // [rows, cols] of a block
	for h := lo; h < hi; h++ {
		g := h / group
		for r0 := 0; r0 < T; r0 += causalBlock {
			r1 := min(r0+causalBlock, T)
			rows, cols := r1-r0, S-T+r1
			pb := p[:rows*cols]
			gemm.Serial(false, true, rows, cols, hd, scale, q[r0*Q+h*hd:], Q, k[g*kv.Head:], kv.Row, 0, pb, cols)
			for t := r0; t < r1; t++ {
				row, valid := pb[(t-r0)*cols:(t-r0+1)*cols], S-T+t+1
				mx, sum := normalize(row[:valid])
				clear(row[valid:])
				if lse != nil {
					lse[h*T+t] = F(float64(mx) + math.Log(sum))
				}
			}
			gemm.Serial(false, false, rows, hd, cols, 1, pb, cols, v[g*kv.Head:], kv.Row, 0, out[r0*Q+h*hd:], Q)
		}
	}
}

// blocks lends attention's workers their score blocks, by element type:
// allocated per call (a small block a layer), they were a visible share of
// the service's allocation under bench/apibench's load.
var blocks [2]sync.Pool // float32, float64

func blockPool[F Float]() *sync.Pool {
	if _, ok := any(F(0)).(float32); ok {
		return &blocks[0]
	}
	return &blocks[1]
}

// lend returns a block of n values holding anything (NaN under go test,
// so that a value read before it is written shows); give it back with
// giveBack.
func lend[F Float](n int) *[]F {
	b, ok := blockPool[F]().Get().(*[]F)
	if ok && cap(*b) >= n {
		*b = (*b)[:n]
	} else {
		s := make([]F, n)
		b = &s
	}
	if poisonLent {
		for i := range *b {
			(*b)[i] = F(math.NaN())
		}
	}
	return b
}

var poisonLent = testing.Testing()

func giveBack[F Float](b *[]F) { blockPool[F]().Put(b) }

// causalBlock is how many query rows attention takes at a time. A block of
// rows [r0, r1) sees only the keys before S−T+r1, so working block by block
// skips most of the masked half of the scores: training's 128×128 causal
// products do 5/8 of the full work in blocks of 32, a 2,000-token prefill
// about half.
const causalBlock = 32

// AttentionBackward sets dq, dk, dv to the gradients of Attention's inputs
// given dout (they need no clearing). Work is split by kv head so that the
// query heads sharing a kv head accumulate into dk and dv on one goroutine.
func AttentionBackward[F Float](dq, dk, dv, dout, q, k, v, out, lse []F, T, S, Hq, Hkv, hd int) {
	Q, KV, group := Hq*hd, Hkv*hd, Hq/Hkv
	scale := F(1 / math.Sqrt(float64(hd)))
	par.For(Hkv, par.MinChunk(5*group*T*S*hd, 1), func(lo, hi int) { // five products per query head
		n := min(T, causalBlock) * S
		bp, bdp := lend[F](n), lend[F](n)
		defer giveBack(bp)
		defer giveBack(bdp)
		p, dp := *bp, *bdp // [rows, cols]: probabilities of a block of query rows; their gradient, then the scores'
		for g := lo; g < hi; g++ {
			// dk and dv: the group's first product sets them, the others
			// add. Blocks run last first, so that first one, which sees
			// every key, covers all of them.
			var acc F
			for h := g * group; h < (g+1)*group; h++ {
				for r1 := T; r1 > 0; r1 -= causalBlock {
					r0 := max(0, r1-causalBlock)
					rows, cols := r1-r0, S-T+r1
					pb, dpb := p[:rows*cols], dp[:rows*cols]
					qb, ob := q[r0*Q+h*hd:], dout[r0*Q+h*hd:]
					gemm.Serial(false, true, rows, cols, hd, scale, qb, Q, k[g*hd:], KV, 0, pb, cols)
					for t := r0; t < r1; t++ {
						row, valid := pb[(t-r0)*cols:(t-r0+1)*cols], S-T+t+1
						ExpShifted(row[:valid], float64(lse[h*T+t]))
						clear(row[valid:])
					}
					// dv += Pᵀ·dout; dP = dout·vᵀ
					gemm.Serial(true, false, cols, hd, rows, 1, pb, cols, ob, Q, acc, dv[g*hd:], KV)
					gemm.Serial(false, true, rows, cols, hd, 1, ob, Q, v[g*hd:], KV, 0, dpb, cols)
					// dS = P ⊙ (dP − rowsum(P ⊙ dP)); that row sum equals dout·out.
					for t := r0; t < r1; t++ {
						var d F
						do, o := dout[t*Q+h*hd:t*Q+(h+1)*hd], out[t*Q+h*hd:t*Q+(h+1)*hd]
						for i := range do {
							d += do[i] * o[i]
						}
						pr, dr := pb[(t-r0)*cols:(t-r0+1)*cols], dpb[(t-r0)*cols:(t-r0+1)*cols]
						for s := range dr {
							dr[s] = pr[s] * (dr[s] - d)
						}
					}
					// dq = scale·dS·k; dk += scale·dSᵀ·q
					gemm.Serial(false, false, rows, hd, cols, scale, dpb, cols, k[g*hd:], KV, 0, dq[r0*Q+h*hd:], Q)
					gemm.Serial(true, false, cols, hd, rows, scale, dpb, cols, qb, Q, acc, dk[g*hd:], KV)
					acc = 1
				}
			}
		}
	})
}
