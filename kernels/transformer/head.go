package transformer

import (
	"slices"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/par"
)

// headBudget bounds the logits held at once (values): a full [T, V] matrix
// for a 150k vocabulary is 600 KB a token. Chunks are as tall as the budget
// allows, because every chunk re-packs the whole LM-head weight: 64 MB gives
// the small model's 8k vocabulary 2048-token chunks and Qwen3's 150k one
// 110-token chunks.
var headBudget = 16 << 20 // a variable for the tests, which cut small vocabularies in chunks

// RowFunc sees one token's logits row [V]. It may overwrite the row with
// dL/dlogits and return true to have that gradient propagated; rows that
// return false contribute no gradient. It is called from several goroutines
// at once, for distinct t.
type RowFunc[F gemm.Float] func(t int, row []F) bool

// Head computes the logits of a pass's rows, hidden·W_lmᵀ plus each
// group's LM-head LoRA term, chunk by chunk, and hands each row to fn.
// When dHidden [T, D] is non-nil, gradients returned by fn are added into
// it and into each group's lm_head LoRA gradient.
func (m *Model[F]) Head(act *Activations[F], dHidden []F, fn RowFunc[F]) {
	D, V := m.W.Cfg.Hidden, m.W.Cfg.Vocab
	gs := act.groups
	head := func(g rowGroup[F]) term[F] { return g.ts.lmHead() }
	m.headPass(gs, maxRank(gs), act.Hidden, act.T(), dHidden, act.ar, fn, func(y, x []F, t0, n int, u []F) {
		linear(y, x, n, D, V, m.head, nil, gs, t0, head, u)
	})
}

// Logits is Head for inference: the logits of T tokens under a frozen
// adapter, handed row by row to fn (from several goroutines at once).
func (m *Model[F]) Logits(z *Frozen[F], hidden []F, T int, ar *Arena[F], fn func(t int, row []F)) {
	zs := make([]*Frozen[F], T)
	for i := range zs {
		zs[i] = z
	}
	m.LogitsRows(zs, hidden, T, ar, fn)
}

// LogitsRows is Logits where row t is under adapter zs[t]: the LM head's
// base product once for all rows, each adapter's term on its own rows.
func (m *Model[F]) LogitsRows(zs []*Frozen[F], hidden []F, T int, ar *Arena[F], fn func(t int, row []F)) {
	gs := groupRows(zs)
	head := func(ts *terms[F], _ lora.Module) term[F] { return ts.lmHead() }
	m.headPass(gs, maxRank(gs), hidden, T, nil, ar, func(t int, row []F) bool {
		fn(t, row)
		return false
	}, func(y, x []F, t0, n int, u []F) {
		linearRows(x, n, m.W.Cfg.Hidden, []proj[F]{{y: y, out: m.W.Cfg.Vocab, w: m.head}}, gs, t0, head, u)
	})
}

// headPass runs the LM head over the rows of groups gs chunk by chunk
// (headChunks): fwd computes the logits of rows [t0, t0+n) (with u as LoRA
// scratch, rank r), which go to fn, and with dHidden the gradients come
// back through each group's LM-head term into dHidden and its gradient.
func (m *Model[F]) headPass(gs []rowGroup[F], r int, hidden []F, T int, dHidden []F, ar *Arena[F], fn RowFunc[F], fwd func(y, x []F, t0, n int, u []F)) {
	c := m.W.Cfg
	D, V := c.Hidden, c.Vocab
	chunk := max(1, headBudget/V)
	rows := min(T, chunk)
	logits := ar.Alloc(rows * V)
	u := ar.Alloc(rows * max(r, 1))
	want := make([]bool, rows)
	headGrad := func(g rowGroup[F]) (term[F], *lora.Pair[F]) {
		if g.grads == nil {
			return g.ts.lmHead(), nil
		}
		return g.ts.lmHead(), g.grads.LMHead
	}
	for t0 := 0; t0 < T; {
		n := headChunk(gs, t0, T, chunk)
		h := hidden[t0*D : (t0+n)*D]
		fwd(logits[:n*V], h, t0, n, u[:n*max(r, 1)])
		grad := dHidden != nil
		if per := par.MinChunk(4*V, 1); par.Splits(n, per) { // a few passes over each row
			par.For(n, per, func(lo, hi int) { headRows(fn, logits, want, t0, V, grad, lo, hi) })
		} else {
			headRows(fn, logits, want, t0, V, grad, 0, n)
		}
		if grad && slices.Contains(want[:n], true) {
			linearBackward(dHidden[t0*D:(t0+n)*D], 1, logits[:n*V], h, n, D, V, m.head, gs, t0, headGrad, u[:n*max(r, 1)], ar)
		}
		t0 += n
	}
}

// headChunk is how many rows from t0 the next chunk of the LM head takes:
// at most chunk, and it cuts a group only where a pass of that group alone
// would, at multiples of chunk from its first row. So a group's logits and
// gradients come out the same, bit for bit, whether other groups share its
// pass or not.
func headChunk[F gemm.Float](gs []rowGroup[F], t0, T, chunk int) int {
	end := t0 + chunk
	if end >= T {
		return T - t0
	}
	for _, g := range gs {
		if g.lo < end && end < g.hi { // g straddles the cut
			if g.lo > t0 {
				return g.lo - t0 // end the chunk before it
			}
			return chunk // within g, at a multiple of chunk from its first row
		}
	}
	return chunk
}

// headRows hands rows [lo, hi) of a chunk of logits (its first token t0)
// to fn, noting in want which gave a gradient and, when the pass has a
// backward (grad), zeroing the others.
func headRows[F gemm.Float](fn RowFunc[F], logits []F, want []bool, t0, V int, grad bool, lo, hi int) {
	for i := lo; i < hi; i++ {
		row := logits[i*V : (i+1)*V]
		want[i] = fn(t0+i, row)
		if !want[i] && grad { // no gradient: zero in the backward product
			clear(row)
		}
	}
}

// TargetLogprob returns log softmax(row)[target], computed as
// row[target] − logsumexp(row) so that no probability is ever logged.
func TargetLogprob[F gemm.Float](row []F, target int) float64 {
	return float64(row[target]) - ops.LogSumExp(row)
}

// LogprobGrad computes logp = log softmax(row)[target], asks grad for
// g = dL/dlogp at that value, and overwrites row with dL/dlogits =
// g·(onehot − softmax). It returns logp.
func LogprobGrad[F gemm.Float](row []F, target int, grad func(logp float64) float64) float64 {
	logit := float64(row[target])
	lse, sum := ops.ExpFromMax(row)
	logp := logit - lse
	g := grad(logp)
	c := F(-g / sum) // row holds e^(x − max): the softmax times sum
	for j := range row {
		row[j] *= c
	}
	row[target] += F(g)
	return logp
}
