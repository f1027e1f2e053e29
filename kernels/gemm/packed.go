package gemm

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/wts-project/wts/kernels/par"
	"github.com/wts-project/wts/kernels/safetensors"
)

// Packed is a frozen matrix B [K, N] stored once in the micro-kernel's
// B-panel layout, for products C = op(A)·B. A linear layer's weight W
// [out, in] is packed as Wᵀ for the forward pass (PackT) and, where it pays,
// as W for the input gradient dx = dy·W (PackN). Packing the same frozen
// weight on every call was a tenth of training time; and since the panels are
// read front to back, decoding streams W at full memory speed whatever the
// batch size, through the same micro-kernel.
//
// Layout: for each kc-deep block of the K axis, all nr-wide column panels,
// each p-major (panel[p][j]), zero-padded to nr.
//
// A matrix packed in a 16-bit type (PackTHalf, PackNHalf: bf16 or IEEE
// f16) keeps the same layout in half the bytes (a bf16 panel row's columns
// paired for the vector unit: see pairBF16): the one-row decode kernels
// read it as it lies, widening each value as they go (decode is bound by
// the bytes it reads), and so do the AVX2 tile kernels; elsewhere the tile
// path widens a panel's k block into a buffer first, which its rows then
// share (halfKernels.direct).
type Packed struct {
	N, K   int
	data   []float32    // nil when the matrix is stored in 16 bits
	half   []uint16     // the 16-bit panels, nil for float32
	kern   *halfKernels // half's kernels
	blocks []int        // offset of each kc block
}

// PackT packs B = Wᵀ for w [n, k] (row-major, row stride ldw).
func PackT(w []float32, n, k, ldw int) *Packed { return (*Slab)(nil).PackT(w, n, k, ldw) }

// PackN packs B = W for w [k, n] (row-major, row stride ldw).
func PackN(w []float32, k, n, ldw int) *Packed { return (*Slab)(nil).PackN(w, k, n, ldw) }

// PackT is the package's PackT with the panels stored in s (nil: their own
// allocation).
func (s *Slab) PackT(w []float32, n, k, ldw int) *Packed {
	p := newPacked(n, k)
	p.data = s.take(PackedLen(n, k))
	fillPanels(p, p.data, true, w, ldw)
	return p
}

// PackN is the package's PackN with the panels stored in s.
func (s *Slab) PackN(w []float32, k, n, ldw int) *Packed {
	p := newPacked(n, k)
	p.data = s.take(PackedLen(n, k))
	fillPanels(p, p.data, false, w, ldw)
	return p
}

// Half is a 16-bit type that panels may be stored in.
type Half uint8

// The 16-bit types: products widen each value exactly and accumulate in
// float32.
const (
	BF16 Half = iota + 1 // bfloat16: float32's top half
	F16                  // IEEE 754 half precision
)

// DType is t as safetensors names it.
func (t Half) DType() safetensors.DType {
	if t == F16 {
		return safetensors.F16
	}
	return safetensors.BF16
}

// Narrow rounds each of x to t (to nearest even).
func (t Half) Narrow(x []float32) []uint16 { return safetensors.ToHalf(t.DType(), x) }

// Widen is h, a value of type t, as a float32 (exactly).
func (t Half) Widen(h uint16) float32 {
	if t == F16 {
		return safetensors.F16ToF32(h)
	}
	return safetensors.BF16ToF32(h)
}

// halfKernels are a 16-bit type's kernels: the one- and four-panel decode
// products (gemv16, gemv64), the widening of panel rows to float32, and
// where the build has them, tile kernels that read its panels as they lie
// (used while direct says so; on, the switch they need).
type halfKernels struct {
	one   func(x []float32, panel []uint16, y *[nr]float32)
	four  func(x []float32, panels []uint16, y *[4 * nr]float32)
	widen func(src []uint16, dst []float32)
	tile  tile16
	on    *bool
}

// kernels are t's kernels.
func (t Half) kernels() *halfKernels {
	switch t {
	case BF16:
		return &bf16Kernels
	case F16:
		return &f16Kernels
	}
	panic("gemm: no such 16-bit type")
}

// tile16 is tile over a 16-bit panel k deep, read as it lies.
type tile16 func(rows, k int, a []float32, rs, cs int, b []uint16, c []float32, ldc int, next *float32, poff, pstep int, set bool, sec *second)

// PackTHalf packs B = Wᵀ for h [n, k] (row-major, row stride ldh), values
// of type t, as they are, in s (nil: their own allocation), which they
// take half as much of as float32 panels (PackedLen(n, k)/2 floats,
// rounded up): a 16-bit checkpoint's weights go in without a float32 copy.
func (s *Slab) PackTHalf(t Half, h []uint16, n, k, ldh int) *Packed {
	return s.packHalf(t, true, h, n, k, ldh)
}

// PackNHalf packs B = W for h [k, n], values of type t, in s.
func (s *Slab) PackNHalf(t Half, h []uint16, k, n, ldh int) *Packed {
	return s.packHalf(t, false, h, n, k, ldh)
}

func (s *Slab) packHalf(t Half, tb bool, h []uint16, n, k, ldh int) *Packed {
	p := newPacked(n, k)
	p.half = s.takeHalf(PackedLen(n, k))
	fillPanels(p, p.half, tb, h, ldh)
	p.kern = t.kernels()
	if t == BF16 {
		// Pair each panel row's columns for the vector unit (pairBF16).
		par.For(len(p.half)/nr, 4096, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				pairBF16((*[nr]uint16)(p.half[r*nr:]))
			}
		})
	}
	return p
}

func newPacked(n, k int) *Packed {
	p := &Packed{N: n, K: k}
	for pc := 0; pc < k; pc += kc {
		p.blocks = append(p.blocks, pc*((n+nr-1)/nr)*nr)
	}
	return p
}

// fillPanels packs op(B) (Wᵀ of w [n, k] when tb, else w [k, n] itself)
// into dst in p's layout.
func fillPanels[T float32 | uint16](p *Packed, dst []T, tb bool, w []T, ldw int) {
	panels := (p.N + nr - 1) / nr
	for bi := range p.blocks {
		pc := bi * kc
		kb := min(kc, p.K-pc)
		par.For(panels, 8, func(lo, hi int) {
			packPanels(tb, w, ldw, pc, kb, 0, p.N, lo, hi, dst[p.blocks[bi]:])
		})
	}
}

// Mul computes C = alpha·op(A)·B + beta·C for op(A) [m, K] (A transposed
// when ta), C [m, N]. Each row of C comes out the same, bit for bit,
// whatever m is: it always runs the tile kernels (the one-row kernels that
// MulAll gives fewer than packedGemvM rows add in another order). Training
// relies on it: a run's rows give the same sums in a pass of their own and
// in one shared with other runs' rows.
func (p *Packed) Mul(ta bool, m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	if m > mc && p.half == nil {
		p.mulBlocked(ta, m, alpha, a, lda, beta, c, ldc)
		return
	}
	// 16-bit panels run mc rows at a time through the tile path, which
	// reads each panel block once for them all.
	for i := 0; i < m; i += mc {
		ai := i * lda // row i of op(A): row i of A, or its column i
		if ta {
			ai = i
		}
		mulFew(nil, []Product{{B: p, TransA: ta, M: min(mc, m-i), Alpha: alpha, A: a[ai:], Lda: lda, Beta: beta,
			C: c[i*ldc:], Ldc: ldc, tiles: true}})
	}
}

// Bytes is the memory the panels take.
func (p *Packed) Bytes() int64 { return 4*int64(len(p.data)) + 2*int64(len(p.half)) }

// at is the address of element i of the panels, for the kernels to touch
// ahead of reading (prefetch) only: of bf16 panels it is not a float32.
func (p *Packed) at(i int) *float32 {
	if p.half != nil {
		return (*float32)(unsafe.Pointer(&p.half[i]))
	}
	return &p.data[i]
}

func (p *Packed) mulBlocked(ta bool, m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	n, k := p.N, p.K
	if n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if beta != 0 { // beta 0: the first k block writes C (see panelTiles)
		scaleC(m, n, beta, c, ldc)
	}
	blocked(par.For, ta, m, n, k, alpha, a, lda, c, ldc, beta == 0, func(jc, pc, kb int) []float32 {
		base := p.data[p.blocks[pc/kc]:]
		panels := (min(nc, n-jc) + nr - 1) / nr
		return base[jc*kb : jc*kb+panels*nr*kb]
	})
}

// Product is one C = alpha·op(A)·B + beta·C against a packed B, for MulAll:
// op(A) [M, B.K] (A transposed when TransA), C [M, B.N]; plus Term, when
// its B is set.
type Product struct {
	B      *Packed
	TransA bool
	M      int
	Alpha  float32
	A      []float32
	Lda    int
	Beta   float32
	C      []float32
	Ldc    int
	Term   Term
	tiles  bool // the tile kernels even for fewer than packedGemvM rows (Mul)
}

// Term is a low-rank term a Product adds to its C: Alpha·U·B for U [M, r]
// (row-major, row stride Ldu) and B packed [r, N], a LoRA term's u·Bᵀ.
// Where FusesTerm allows, it rides on the base product's panels: on tile
// rows read in place its r steps go into the tiles' sums before they are
// stored, and gemv rows walk its panels after each claim's base k blocks.
// In their own regions, the terms took several times their multiply-adds'
// share of a many-stream decode step (each k = r tile loaded and stored its
// C for every step), and a one-stream step ran longer too (decode figures
// of bench/enginebench). Elsewhere it runs after the base product, as a
// product of its own.
type Term struct {
	B     *Packed
	U     []float32
	Ldu   int
	Alpha float32
}

// FusesTerm reports whether a product of m rows carries a Term of rank r
// on its own panels rather than in a pass of its own: gemv's rows, or tile
// rows that cut into tiles of 4 to 6 in place.
func FusesTerm(m, r int) bool {
	return m <= mc && r <= kc && (m < packedGemvM || inPlaceRows(m))
}

// alone is the term as a product of its own, added into C.
func (t Term) alone(m int, c []float32, ldc int) Product {
	return Product{B: t.B, M: m, Alpha: t.Alpha, A: t.U, Lda: t.Ldu, Beta: 1, C: c, Ldc: ldc}
}

// MulAll computes every product of ps; they must not write where another
// reads. Products of few rows (decoding) run in one parallel region: a
// decode step's projections come in sets that read one input (q, k and v
// with their LoRA x·Aᵀ; gate and up with theirs), and run one by one, a
// LoRA x·Aᵀ of a single panel had one core read it while the other waited,
// and every region's start and ragged end cost the helpers' time again.
func MulAll(ps []Product) { MulAllAfter(nil, ps) }

// MulAllAfter computes pre, then ps, whose Terms may read what pre writes
// (LoRA's x·Aᵀ, then the base products their u·Bᵀ ride on); nothing else
// of ps may, and none may write where another reads. In a region
// the caller computes pre while the other workers start on ps's panels,
// which wait for pre only at their terms' steps: computed first on the
// caller alone, the x·Aᵀ of a many-stream decode step kept the other cores
// waiting for a noticeable part of the step (bench/enginebench's decode).
func MulAllAfter(pre, ps []Product) {
	for _, pr := range ps {
		if pr.Term.B != nil && pr.Term.B.N != pr.B.N {
			panic("gemm: a term's width differs from its product's")
		}
	}
	sets := [2][]Product{pre, ps}
	for _, set := range sets {
		for _, pr := range set {
			if pr.M <= mc {
				continue
			}
			// A prompt's rows: each product fills the cores alone.
			for _, set := range sets {
				for _, pr := range set {
					pr.B.Mul(pr.TransA, pr.M, pr.Alpha, pr.A, pr.Lda, pr.Beta, pr.C, pr.Ldc)
					if t := pr.Term; t.B != nil {
						t.B.Mul(false, pr.M, t.Alpha, t.U, t.Ldu, 1, pr.C, pr.Ldc)
					}
				}
			}
			return
		}
	}
	mulFew(pre, ps)
}

// mulFew runs products of at most mc rows each in one parallel region, the
// workers claiming the products' column panels as they go (see work); pre
// first on the caller (see MulAllAfter).
func mulFew(pre, ps []Product) {
	j := fewPool.Get().(*fewJob)
	defer fewPool.Put(j)
	plans, rest := j.plans[:0], j.rest[:0]
	j.pre = j.pre[:0]
	for _, pr := range pre {
		if pl, ok := newPlan(pr); ok {
			j.pre = append(j.pre, pl)
		}
	}
	j.ready.Store(len(j.pre) == 0)
	units, work := 0, 0
	for _, pr := range ps {
		if pl, ok := newPlan(pr); ok {
			if pl.term != nil && len(j.pre) > 0 {
				pl.ready = &j.ready
			}
			plans = append(plans, pl)
			units += pl.panels
			work += pl.cost()
			if pl.term != nil {
				continue
			}
		}
		if pr.Term.B != nil && pr.M > 0 && pr.B.N > 0 {
			rest = append(rest, pr.Term.alone(pr.M, pr.C, pr.Ldc))
		}
	}
	j.plans, j.rest = plans, rest
	if len(j.pre) == 0 { // the terms' U are final already
		for i := range plans {
			plans[i].foldAlpha()
		}
	}
	if units > 0 {
		j.run(plans, units, work)
	} else {
		j.runPre()
	}
	clear(plans) // drop the references to A and C
	clear(j.pre)
	if len(rest) > 0 {
		mulFew(nil, rest) // the terms that did not ride on their products' tiles
		clear(rest)
	}
}

// newPlan makes pr ready to run, or scales its C and reports false when
// there is nothing to multiply.
func newPlan(pr Product) (rowsPlan, bool) {
	n, k := pr.B.N, pr.B.K
	if pr.M == 0 || n == 0 {
		return rowsPlan{}, false
	}
	if k == 0 || pr.Alpha == 0 {
		scaleC(pr.M, n, pr.Beta, pr.C, pr.Ldc)
		return rowsPlan{}, false
	}
	pl := newRowsPlan(pr)
	if !pl.set {
		scaleC(pr.M, n, pr.Beta, pr.C, pr.Ldc)
	}
	return pl, true
}

// runPre computes the region's pre products (on the caller, the only one
// that runs it), folds the terms' alphas into their U, which pre may have
// written, and opens the gate the terms' tiles wait at.
func (j *fewJob) runPre() {
	if j.ready.Load() {
		return
	}
	for i := range j.pre {
		j.pre[i].run(0, j.pre[i].panels, nil)
		j.pre[i].release()
	}
	for i := range j.plans {
		j.plans[i].foldAlpha()
	}
	j.ready.Store(true)
}

// run runs the region's plans, units panels in all, work their cost.
func (j *fewJob) run(plans []rowsPlan, units, work int) {
	floor := 2
	j.grain = 1 // the tile kernels take a panel's k blocks at once
	if plans[0].gemv {
		j.grain, floor = 4, 4 // gemv walks four panels at a time
		// Claims come in fours of the region's panels, so products whose
		// panels are not a multiple of four go last: one in front (LoRA's
		// one-panel x·Aᵀ before its base product) shifted every later
		// product's fours, whose ends then went through the one-panel
		// kernel: 11 of the 105 MB of a one-stream decode step of the small
		// model, 2 once ordered (the step ~1% shorter).
		slices.SortStableFunc(plans, func(a, b rowsPlan) int {
			return cmp.Compare(min(a.panels%4, 1), min(b.panels%4, 1))
		})
	}
	j.slots = max(1, min(par.Workers(), units/par.MinChunk(work/units, floor)))
	if j.slots == 1 { // too little to share (a tiny model's products): no region
		j.runPre()
		for i := range plans {
			plans[i].run(0, plans[i].panels, nil)
		}
	} else {
		j.first = append(j.first[:0], 0)
		for i := range plans {
			j.first = append(j.first, j.first[i]+plans[i].panels)
		}
		j.next.Store(0)
		par.For(j.slots, 1, j.body)
	}
	for i := range plans {
		plans[i].release()
	}
}

// fewJob is one mulFew region: its plans and how its panels are shared
// out. Jobs are recycled with their body bound once, so that a region
// allocates nothing: a decode step makes dozens of regions, a tiny model's
// forward ~100, and allocating their plans (which hold pointers, so the
// collector scans them) and their closures was a few percent of either.
type fewJob struct {
	plans []rowsPlan
	pre   []rowsPlan  // run on the caller first (see MulAllAfter)
	ready atomic.Bool // pre is done: the terms' U hold their values
	rest  []Product   // terms to run after the region, as products of their own
	slots int
	grain int          // panels a claim takes at least
	first []int        // plan i holds the region's panels [first[i], first[i+1])
	next  atomic.Int64 // the first of the region's panels nobody has claimed
	body  func(lo, hi int)
}

var fewPool = sync.Pool{New: func() any {
	j := new(fewJob)
	j.body = func(lo, _ int) {
		if lo == 0 { // the caller's share (see par.For)
			j.runPre()
		}
		j.work()
	}
	return j
}}

// work claims the region's panels and runs them until none are left. The
// workers claim from one counter instead of taking fixed shares: split
// evenly, the shares still ended apart (the helper starts later and
// streams a little slower), and a many-stream decode step spent a tenth of
// its time waiting at its regions' ends (bench/enginebench's decode). A worker
// claims its
// next panels before running these, so that the last of them can prefetch
// the first of the next.
func (j *fewJob) work() {
	lo, hi := j.claim()
	for lo < hi {
		nlo, nhi := j.claim()
		j.runPanels(lo, hi, j.panelData(nlo))
		lo, hi = nlo, nhi
	}
}

// claim takes the next panels [lo, hi) of the region, in order, so that the
// workers stream each matrix side by side: a share of what is left that
// shrinks as it runs out, so that the workers seldom meet at the counter
// early and end close together.
func (j *fewJob) claim() (lo, hi int) {
	total := j.first[len(j.plans)]
	for {
		cur := int(j.next.Load())
		if cur >= total {
			return total, total
		}
		n := max(j.grain, (total-cur)/(4*j.slots)/j.grain*j.grain)
		if j.next.CompareAndSwap(int64(cur), int64(cur+n)) {
			return cur, min(cur+n, total)
		}
	}
}

// runPanels runs the region's panels [lo, hi), which may span plans; after
// is the data of the panel to prefetch once they are done (nil: none).
func (j *fewJob) runPanels(lo, hi int, after *float32) {
	for i := range j.plans {
		a, b := max(lo, j.first[i]), min(hi, j.first[i+1])
		if a >= b {
			continue
		}
		next := after
		if b < hi {
			next = j.panelData(b)
		}
		j.plans[i].run(a-j.first[i], b-j.first[i], next)
	}
}

// panelData is the first float of the region's panel q as the tile
// kernels read it (its first k block), nil past the last.
func (j *fewJob) panelData(q int) *float32 {
	for i := range j.plans {
		if q < j.first[i+1] {
			p := j.plans[i].p
			return p.at(p.blocks[0] + (q-j.first[i])*nr*min(kc, p.K))
		}
	}
	return nil
}

// rowsPlan is one few-rows product made ready to run panel by panel: alpha
// folded into a copy of A when it is not 1, and for the tile kernels the
// rows after the last whole tile packed.
type rowsPlan struct {
	p      *Packed
	m      int
	gemv   bool      // m < packedGemvM and A not transposed: the one-row kernels
	set    bool      // beta 0 and the tile kernels: the first k block writes C
	a      []float32 // row-major A (alpha folded) for gemv
	lda    int
	src    aBlock // A in place for the tile kernels
	whole  int    // rows [0, whole) go through src, the rest through tail
	tail   []float32
	c      []float32
	ldc    int
	panels int
	term   *Packed   // the Term riding on the tiles (nil: none)
	tu     []float32 // its U, Alpha folded in by foldAlpha
	ldu    int
	talpha float32       // 1 once folded
	ready  *atomic.Bool  // nil, or the gate its terms wait at (see MulAllAfter)
	bufs   [3]*[]float32 // pool buffers to put back
}

func newRowsPlan(pr Product) rowsPlan {
	p, m, k := pr.B, pr.M, pr.B.K
	pl := rowsPlan{p: p, m: m, a: pr.A, lda: pr.Lda, c: pr.C, ldc: pr.Ldc, panels: (p.N + nr - 1) / nr}
	ta := pr.TransA
	if pr.Alpha != 1 {
		pl.bufs[0] = scaledRows(ta, m, k, pr.Alpha, pr.A, pr.Lda)
		ta, pl.a, pl.lda = false, *pl.bufs[0], k
	}
	if m < packedGemvM && !ta && !pr.tiles {
		pl.gemv = true
		pl.takeTerm(pr.Term)
		return pl
	}
	pl.src = inPlace(ta, pl.a, pl.lda)
	pl.set = pr.Beta == 0
	pl.whole = m / mr * mr
	if inPlaceRows(m) {
		pl.whole = m
	}
	if pl.whole < m { // per k block at pc·mr, one packed tile
		pl.bufs[1] = getBuf(mr * k)
		pl.tail = (*pl.bufs[1])[:mr*k]
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			packA(ta, pl.a, pl.lda, pl.whole, m-pl.whole, pc, kb, 1, pl.tail[pc*mr:pc*mr+mr*kb])
		}
	}
	if pl.whole == m {
		pl.takeTerm(pr.Term)
	}
	return pl
}

// takeTerm makes t (none when its B is nil) ride on the plan's panels where
// FusesTerm says it can: the tile kernels add it into their sums, gemv
// walks its panels after each claim's base k blocks.
func (pl *rowsPlan) takeTerm(t Term) {
	if t.B != nil && FusesTerm(pl.m, t.B.K) {
		pl.term, pl.tu, pl.ldu, pl.talpha = t.B, t.U, t.Ldu, t.Alpha
	}
}

// foldAlpha puts the term's Alpha·U in a copy when Alpha is not 1, once U
// holds its values (after pre).
func (pl *rowsPlan) foldAlpha() {
	if pl.term == nil || pl.talpha == 1 {
		return
	}
	pl.bufs[2] = scaledRows(false, pl.m, pl.term.K, pl.talpha, pl.tu, pl.ldu)
	pl.tu, pl.ldu, pl.talpha = *pl.bufs[2], pl.term.K, 1
}

// cost is the plan's work in multiply-adds of cached data (a streaming
// weight's element counts as streamRows rows), for sizing the region.
func (pl *rowsPlan) cost() int {
	k := pl.p.K
	if pl.term != nil {
		k += pl.term.K
	}
	return pl.panels * nr * max(pl.m, streamRows) * k
}

func (pl *rowsPlan) release() {
	for _, b := range pl.bufs {
		if b != nil {
			packPool.Put(b)
		}
	}
}

// run computes panels [lo, hi); after is the panel the worker reads next
// (nil: none), for the tile kernels to prefetch.
func (pl *rowsPlan) run(lo, hi int, after *float32) {
	if pl.gemv {
		pl.gemvPanels(lo, hi)
	} else {
		pl.tilePanels(lo, hi, after)
	}
}

// tilePanels serves a block of rows (batched decode: a row per sequence)
// over panels [lo, hi), each panel's k blocks in turn before the next: no
// barrier per k block, and a worker reads its weights as k/kc interleaved
// streams, which draw more bandwidth than one. A is read where it lies, so
// nothing is packed while the workers wait (packing 16 rows serially was a
// seventh of a batched decode step); only rows after the last whole tile,
// when the rows do not cut into tiles of 4 to 6, are packed (zero-padded,
// by newRowsPlan), so that no kernel reads past A.
func (pl *rowsPlan) tilePanels(lo, hi int, after *float32) {
	last := len(pl.p.blocks) - 1
	if pl.term == nil {
		for q := lo; q < hi; q++ {
			for bi := 0; bi <= last; bi++ {
				// The next panel this worker reads: this one in the next
				// k block, or the next one in the first.
				next := after
				switch {
				case bi < last:
					next = pl.blockData(q, bi+1)
				case q+1 < hi:
					next = pl.blockData(q+1, 0)
				}
				pl.tileBlock(q, bi, next, false)
			}
		}
		return
	}
	// With a term riding on the last k block, the panels' other blocks go
	// first, so that a worker that starts before pre is done has work to do
	// before it waits for its U at the gate.
	for q := lo; q < hi; q++ {
		for bi := 0; bi < last; bi++ {
			var next *float32
			switch {
			case bi+1 < last:
				next = pl.blockData(q, bi+1)
			case q+1 < hi:
				next = pl.blockData(q+1, 0)
			default: // the first panel of the pass with the term
				next = pl.blockData(lo, last)
			}
			pl.tileBlock(q, bi, next, false)
		}
	}
	pl.wait()
	for q := lo; q < hi; q++ {
		next := after
		if q+1 < hi {
			next = pl.blockData(q+1, last)
		}
		pl.tileBlock(q, last, next, true)
	}
}

// wait returns once the term's U holds its values (see MulAllAfter).
func (pl *rowsPlan) wait() {
	if pl.ready == nil {
		return
	}
	for i := 0; !pl.ready.Load(); i++ {
		if i%64 == 63 {
			par.Yield()
		}
	}
}

// blockData is the first float of panel q's k block bi.
func (pl *rowsPlan) blockData(q, bi int) *float32 {
	p := pl.p
	return p.at(p.blocks[bi] + q*nr*min(kc, p.K-bi*kc))
}

// tileBlock runs panel q's k block bi through the tile kernels, with the
// term when withTerm; next is the data the worker reads after it (nil:
// none), which its tiles touch.
func (pl *rowsPlan) tileBlock(q, bi int, next *float32, withTerm bool) {
	p, pc := pl.p, bi*kc
	kb, nw := min(kc, p.K-pc), min(nr, p.N-q*nr)
	at := p.blocks[bi] + q*nr*kb
	var b bPanel
	var wide *[]float32
	switch {
	case p.half == nil:
		b.f = p.data[at:][:nr*kb]
	case p.kern.direct():
		b.h, b.kern = p.half[at:][:nr*kb], p.kern
	default: // widened once for all the rows
		wide = getBuf(nr * kb)
		b.f = (*wide)[:nr*kb]
		p.kern.widen(p.half[at:][:nr*kb], b.f)
	}
	if next == nil {
		next = p.at(at)
	}
	set := pl.set && bi == 0
	var sec *second
	if withTerm {
		r := pl.term.K
		sec = &second{a: pl.tu, rs: pl.ldu, cs: 1, b: pl.term.data[pl.term.blocks[0]+q*nr*r:][:nr*r], k: r}
	}
	panelTiles(pl.src.from(0, pc), b, pl.c, pl.ldc, 0, pl.whole, q*nr, kb, nw, next, set, sec)
	if pl.tail != nil {
		panelTiles(aBlock{a: pl.tail[pc*mr:]}, b, pl.c, pl.ldc, pl.whole, pl.m-pl.whole, q*nr, kb, nw, next, set, nil)
	}
	if wide != nil {
		packPool.Put(wide)
	}
}

// streamRows is the row count below which a product's cost is its weight's
// bytes, not its multiply-adds: a weight element streaming from memory costs
// one core about what this many multiply-adds on cached data do, so LoRA's
// thin u·Bᵀ (k = r) in one-stream decode is worth both cores after all.
const streamRows = 8

// packedGemvM is the row count below which products walk the panels with a
// one-row kernel: the 6-row micro-kernel would compute mostly padding.
const packedGemvM = 4

// gemvPanels serves few rows (single-stream decode) over panels [lo, hi),
// walking the k blocks outermost, four panels at a time, so within a block
// it reads four sequential streams, the access pattern that draws the most
// bandwidth from memory (one stream alone gets about a fifth less). The
// kernels add straight into C.
func (pl *rowsPlan) gemvPanels(lo, hi int) {
	p, m, n, k := pl.p, pl.m, pl.p.N, pl.p.K
	full := n / nr                    // panels with all nr columns in C
	var edge [packedGemvM][nr]float32 // sums of the last, partial panel, per row
	for bi, pc := 0, 0; pc < k; bi, pc = bi+1, pc+kc {
		if p.half != nil {
			pl.gemvBlockHalf(pl.a[pc:], pl.lda, p.half[p.blocks[bi]:], min(kc, k-pc), lo, hi, &edge)
			continue
		}
		pl.gemvBlock(pl.a[pc:], pl.lda, p.data[p.blocks[bi]:], min(kc, k-pc), lo, hi, &edge)
	}
	if t := pl.term; t != nil { // its panels are one k block, r deep
		pl.wait()
		pl.gemvBlock(pl.tu, pl.ldu, t.data[t.blocks[0]:], t.K, lo, hi, &edge)
	}
	if hi > full {
		for i := 0; i < m; i++ {
			out := pl.c[i*pl.ldc+full*nr : i*pl.ldc+n]
			for j := range out {
				out[j] += edge[i][j]
			}
		}
	}
}

// gemvBlock adds the rows of x (row stride ldx), kb wide, times panels
// [lo, hi) of one packed k block (base, kb deep) into C; the sums of the
// last, partial panel go to edge.
func (pl *rowsPlan) gemvBlock(x []float32, ldx int, base []float32, kb, lo, hi int, edge *[packedGemvM][nr]float32) {
	gemvWalk(pl, x, ldx, base, kb, lo, hi, edge, gemv16, gemv64)
}

// gemvBlockHalf is gemvBlock over 16-bit panels.
func (pl *rowsPlan) gemvBlockHalf(x []float32, ldx int, base []uint16, kb, lo, hi int, edge *[packedGemvM][nr]float32) {
	gemvWalk(pl, x, ldx, base, kb, lo, hi, edge, pl.p.kern.one, pl.p.kern.four)
}

// gemvWalk is gemvBlock with the panels' element type and their one- and
// four-panel kernels as parameters.
func gemvWalk[T float32 | uint16](pl *rowsPlan, x []float32, ldx int, base []T, kb, lo, hi int, edge *[packedGemvM][nr]float32,
	one func([]float32, []T, *[nr]float32), four func([]float32, []T, *[4 * nr]float32)) {
	full := pl.p.N / nr
	for i := 0; i < pl.m; i++ {
		xi, y := x[i*ldx:i*ldx+kb], pl.c[i*pl.ldc:]
		q := lo
		for ; q+4 <= min(hi, full); q += 4 {
			four(xi, base[q*nr*kb:(q+4)*nr*kb], (*[4 * nr]float32)(y[q*nr:q*nr+4*nr]))
		}
		for ; q < min(hi, full); q++ {
			one(xi, base[q*nr*kb:(q+1)*nr*kb], (*[nr]float32)(y[q*nr:q*nr+nr]))
		}
		if q < hi { // q == full: the partial panel
			one(xi, base[q*nr*kb:(q+1)*nr*kb], &edge[i])
		}
	}
}

// scaledRows returns alpha·op(A) [m, k] as a row-major copy from the pool
// (put it back when done): the products that read A in place fold alpha in
// here, on few rows (LoRA's u·Bᵀ: m × rank).
func scaledRows(ta bool, m, k int, alpha float32, a []float32, lda int) *[]float32 {
	buf := getBuf(m * k)
	src := inPlace(ta, a, lda)
	for i := 0; i < m; i++ {
		for q, row := 0, (*buf)[i*k:(i+1)*k]; q < k; q++ {
			row[q] = alpha * src.a[i*src.rs+q*src.cs]
		}
	}
	return buf
}
