package transformer

import (
	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
)

// weight is a matrix W [out, in] (row-major) as the products use it. Frozen
// float32 ones (base projections, a Frozen adapter's pairs) are also packed
// once as Wᵀ for the forward product and, for the base model's, as W for the
// input gradient (their W is then dropped, see New). Training's LoRA pairs
// and the float64 reference path have no packed copies.
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

// newWeight wraps W [out, in]; for float32 it is also packed as Wᵀ, in s
// (nil: its own allocation).
func newWeight[F gemm.Float](s *gemm.Slab, W []F, out, in int) weight[F] {
	w := weight[F]{W: W}
	if w32, ok := any(W).([]float32); ok {
		w.packed = s.PackT(w32, out, in, in)
	}
	return w
}

// newFrozenWeight wraps a base model's W [out, in]; for float32 it is also
// packed as W for the input gradient.
func newFrozenWeight[F gemm.Float](s *gemm.Slab, W []F, out, in int) weight[F] {
	w := newWeight(s, W, out, in)
	if w.packed != nil {
		w.grad = s.PackN(any(W).([]float32), out, in, in)
	}
	return w
}

// halfWeight wraps a base model's h [out, in], values of the 16-bit type
// t, packed as Wᵀ and as W (see newFrozenWeight), with no float32 copy.
func halfWeight[F gemm.Float](s *gemm.Slab, t gemm.Half, h []uint16, out, in int) weight[F] {
	return weight[F]{packed: s.PackTHalf(t, h, out, in, in), grad: s.PackNHalf(t, h, out, in, in)}
}

// mul computes y = alpha·x·Wᵀ + beta·y for x [T, in], y [T, out].
func (w weight[F]) mul(y, x []F, T, in, out int, alpha, beta F) {
	if w.packed != nil {
		w.packed.Mul(false, T, any(alpha).(float32), any(x).([]float32), in, any(beta).(float32), any(y).([]float32), out)
		return
	}
	gemm.Gemm(false, true, T, out, in, alpha, x, in, w.W, in, beta, y, out)
}

// linear computes y = x·Wᵀ + b for rows [t0, t0+T) of a batch, plus each
// group's LoRA term on its rows: y += s·(x·Aᵀ)·Bᵀ (termOf gives it; the
// zero term adds nothing). It serves training, whose pairs change every
// step and are read in place: the base product runs once for all rows
// (Packed.Mul: each row's sums the same however many rows share it), then
// the terms one group after another.
// x: [T, in]; W: [out, in]; b: [out] or nil; y: [T, out].
// u receives each term's x·Aᵀ for the backward pass, rows × rank, carved
// by group in order (linearBackward finds each share the same way).
func linear[F gemm.Float](y, x []F, T, in, out int, w weight[F], b []F, gs []rowGroup[F], t0 int, termOf func(rowGroup[F]) term[F], u []F) {
	w.mul(y, x, T, in, out, 1, 0)
	addBias(y, b, T, out)
	for _, g := range gs {
		lo, hi := g.within(t0, T)
		lt := termOf(g)
		if lo >= hi || lt.a.W == nil {
			continue
		}
		n, r := hi-lo, len(lt.a.W)/in
		ug := u[:n*r]
		u = u[n*r:]
		lt.a.mul(ug, x[lo*in:hi*in], n, in, r, 1, 0)
		lt.b.mul(y[lo*out:hi*out], ug, n, r, out, lt.s, 1)
	}
}

// addBias adds b [out] (nil: nothing) to each row of y [T, out].
func addBias[F gemm.Float](y, b []F, T, out int) {
	if b == nil {
		return
	}
	for t := 0; t < T; t++ {
		row := y[t*out : (t+1)*out]
		for j := range row {
			row[j] += b[j]
		}
	}
}

// mulOp is one y = alpha·x·Wᵀ + beta·y (x [m, in], y [m, out]) for mulAll,
// plus t's u·Bᵀ term when t has a pair: y += t.s·u·t.bᵀ, u [m, r].
type mulOp[F gemm.Float] struct {
	w           weight[F]
	m, in, out  int
	alpha, beta F
	x, y        []F
	t           term[F]
	u           []F
}

// mulAll runs pre, then ops, which must not write what another reads
// (ops' terms may read what pre writes): in one parallel region when every
// weight is packed (float32 inference, see gemm.MulAllAfter), one after
// another otherwise (the float64 reference path).
func mulAll[F gemm.Float](pre, ops []mulOp[F]) {
	var buf0, buf [8]gemm.Product
	pp, ps := buf0[:0], buf[:0]
	packed := true
	for _, set := range [2][]mulOp[F]{pre, ops} {
		for _, o := range set {
			packed = packed && o.w.packed != nil && (o.t.b.W == nil || o.t.b.packed != nil)
		}
	}
	if !packed {
		for _, set := range [2][]mulOp[F]{pre, ops} {
			for _, o := range set {
				o.w.mul(o.y, o.x, o.m, o.in, o.out, o.alpha, o.beta)
				if o.t.b.W != nil {
					o.t.b.mul(o.y, o.u, o.m, len(o.u)/o.m, o.out, o.t.s, 1)
				}
			}
		}
		return
	}
	for _, o := range pre {
		pp = append(pp, o.product())
	}
	for _, o := range ops {
		ps = append(ps, o.product())
	}
	gemm.MulAllAfter(pp, ps)
}

// product is o for gemm, its weights packed float32.
func (o mulOp[F]) product() gemm.Product {
	p := gemm.Product{B: o.w.packed, M: o.m, Alpha: any(o.alpha).(float32), A: any(o.x).([]float32), Lda: o.in,
		Beta: any(o.beta).(float32), C: any(o.y).([]float32), Ldc: o.out}
	if o.t.b.W != nil {
		p.Term = gemm.Term{B: o.t.b.packed, U: any(o.u).([]float32), Ldu: o.t.b.packed.K, Alpha: any(o.t.s).(float32)}
	}
	return p
}

// rowGroup gives rows [lo, hi) of a batch their adapter's terms (nil: the
// base model) and, in a training pass, the adapter gradient they add into:
// a batch of several samplers' sequences, or of several runs' training
// passes, over one base model runs every base product once for all its
// rows, and each adapter's LoRA terms on its own rows.
type rowGroup[F gemm.Float] struct {
	ts     *terms[F]
	grads  *lora.Adapter[F]
	lo, hi int
}

// groupRows groups consecutive rows that share an adapter.
func groupRows[F gemm.Float](zs []*Frozen[F]) []rowGroup[F] {
	var gs []rowGroup[F]
	for i, z := range zs {
		if n := len(gs); n > 0 && gs[n-1].ts == z.view() {
			gs[n-1].hi = i + 1
			continue
		}
		gs = append(gs, rowGroup[F]{ts: z.view(), lo: i, hi: i + 1})
	}
	return gs
}

// maxRank is the largest adapter rank among the groups (the LoRA scratch
// holds T rows of it).
func maxRank[F gemm.Float](gs []rowGroup[F]) int {
	r := 0
	for _, g := range gs {
		r = max(r, g.ts.rank())
	}
	return r
}

// within is g's rows among [t0, t0+T), relative to t0; lo >= hi when it
// has none.
func (g rowGroup[F]) within(t0, T int) (lo, hi int) {
	return max(g.lo, t0) - t0, min(g.hi, t0+T) - t0
}

// proj is one projection of a set that reads the same input: y [T, out] =
// x·Wᵀ + b plus module mod's LoRA term.
type proj[F gemm.Float] struct {
	y   []F
	out int
	w   weight[F]
	b   []F
	mod lora.Module
}

// linearRows computes the projections ps of x [T, in] over rows whose LoRA
// terms differ by group: the base products for all T rows at once, then
// each group's term, taken from its adapter by termOf, on that group's rows
// among [t0, t0+T). The projections' base products and the terms' x·Aᵀ run
// as one set of products, then the terms' u·Bᵀ as another: a decode step's
// q, k and v (or gate and up) take two parallel regions instead of eight.
// Where one group holds all the rows and the products' tiles can carry the
// terms (gemm.FusesTerm: decode's batches of up to 96 rows), the x·Aᵀ run
// first, on the caller while the other cores start on the base products,
// and each u·Bᵀ rides on its base product's tiles instead.
// u: scratch of at least len(ps)·T·maxRank.
func linearRows[F gemm.Float](x []F, T, in int, ps []proj[F], gs []rowGroup[F], t0 int, termOf func(*terms[F], lora.Module) term[F], u []F) {
	var buf0, buf1, buf2 [8]mulOp[F]
	pre, first, second := buf0[:0], buf1[:0], buf2[:0]
	fuse := len(gs) == 1 && gs[0].lo <= t0 && gs[0].hi >= t0+T
	for _, p := range ps {
		base := mulOp[F]{w: p.w, m: T, in: in, out: p.out, alpha: 1, x: x, y: p.y}
		for _, g := range gs {
			lo, hi := g.within(t0, T)
			lt := termOf(g.ts, p.mod)
			if lo >= hi || lt.a.W == nil {
				continue
			}
			n, r := hi-lo, len(lt.a.W)/in
			ug := u[:n*r]
			u = u[n*r:]
			xa := mulOp[F]{w: lt.a, m: n, in: in, out: r, alpha: 1, x: x[lo*in : hi*in], y: ug}
			if fuse && lt.b.packed != nil && gemm.FusesTerm(n, r) {
				pre = append(pre, xa)
				base.t, base.u = lt, ug
				continue
			}
			first = append(first, xa)
			second = append(second, mulOp[F]{w: lt.b, m: n, in: r, out: p.out, alpha: lt.s, beta: 1, x: ug, y: p.y[lo*p.out : hi*p.out]})
		}
		first = append(first, base)
	}
	mulAll(pre, first)
	for _, p := range ps {
		addBias(p.y, p.b, T, p.out)
	}
	if len(second) > 0 {
		mulAll(nil, second)
	}
}

// linearBackward sets dx to beta·dx + dL/dx (skipped when dx is nil; beta
// 0 for the first of the projections that read one input, whose dx then
// needs no clearing, 1 for the others) for rows [t0, t0+T) of a batch, and
// for each group of gs with a LoRA term there (termOf: the term and its
// gradient pair) adds dL/dA and dL/dB into the pair. W and b are frozen.
// The input gradient's base product runs once for all rows; each group's
// term then on its own rows, with its share of u as linearRows carved it.
func linearBackward[F gemm.Float](dx []F, beta F, dy, x []F, T, in, out int, w weight[F], gs []rowGroup[F], t0 int, termOf func(rowGroup[F]) (term[F], *lora.Pair[F]), u []F, ar *Arena[F]) {
	switch {
	case dx == nil:
	case w.grad != nil:
		w.grad.Mul(false, T, 1, any(dy).([]float32), out, any(beta).(float32), any(dx).([]float32), in)
	default:
		gemm.Gemm(false, false, T, in, out, 1, dy, out, w.W, in, beta, dx, in)
	}
	for _, g := range gs {
		lo, hi := g.within(t0, T)
		lt, gp := termOf(g)
		if lo >= hi || lt.a.W == nil {
			continue
		}
		n, r := hi-lo, len(lt.a.W)/in
		var dxg []F
		if dx != nil {
			dxg = dx[lo*in : hi*in]
		}
		termBackward(dxg, dy[lo*out:hi*out], x[lo*in:hi*in], n, in, out, lt, gp, u[:n*r], ar)
		u = u[n*r:]
	}
}

// termBackward adds one LoRA term's share of the gradients for T rows:
//
//	dB += s·dyᵀ·u    [out, r]
//	du  = s·dy·B     [T, r]
//	dA += duᵀ·x      [r, in]
//	dx += du·A       (dx nil: skipped)
func termBackward[F gemm.Float](dx, dy, x []F, T, in, out int, lt term[F], gp *lora.Pair[F], u []F, ar *Arena[F]) {
	A, B, s := lt.a.W, lt.b.W, lt.s
	r := len(A) / in
	du := ar.Take(T * r)
	gemm.Gemm(false, false, T, r, out, s, dy, out, B, r, 0, du, r)
	if gp != nil {
		gemm.Gemm(true, false, out, r, T, s, dy, out, u, r, 1, gp.B, r)
		gemm.Gemm(true, false, r, in, T, 1, du, r, x, in, 1, gp.A, in)
	}
	if dx != nil {
		gemm.Gemm(false, false, T, in, r, 1, du, r, A, in, 1, dx, in)
	}
}
