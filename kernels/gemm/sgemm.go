package gemm

import (
	"sync"

	"github.com/wts-project/wts/kernels/par"
)

// Blocking for the packed path (the BLIS loop order). A packed A block
// (mc×kc, 96 KiB) stays in L2, a packed B panel (kc×nr, 16 KiB) in L1, and the
// micro-kernel keeps an mr×nr tile of C in twelve AVX registers.
const (
	mr = 6
	nr = 16
	kc = 256
	mc = 96 // multiple of mr
	nc = 3072
)

// smallM is the row count below which op(B) is read in place instead of
// packed: in decoding (one row per sequence, up to a few dozen sequences) the
// weight is read once either way, and packing it would triple the traffic.
const smallM = 32

// smallK is the depth below which few-row products are packed after all:
// a dot product that short is mostly call and reduction overhead (LoRA's
// u·Bᵀ, k = r), and packing a [k, n] operand that thin costs next to nothing.
const smallK = 64

// dotN is the output width up to which few-row products against a
// row-major op(B) take dot products even when k is below smallK: LoRA's
// x·Aᵀ (n = r) on a small model padded a 16-wide panel to fill 4 columns,
// and its packing cost several times the dot products (BenchmarkFewRows).
const dotN = 8

// thinK is the depth up to which a few-row product against a row-major
// [n, k] op(B) at least 8 wide transposes B (k·n floats, in cache) and has
// each output row gather its k rows: LoRA's u·Bᵀ (k = r) took the packed
// path's full overhead for a few thousand multiply-adds, and below 64
// columns, where eight rows at a time go through rows8x8, narrowGemm's
// (BenchmarkFewRows).
const thinK = 8

// transpose writes the [n, k] matrix b (row stride ldb) into dst as [k, n],
// four of dst's rows at a time: element by element it was half of a thin
// product's time (LoRA's u·Bᵀ; BenchmarkFewRows).
func transpose(b []float32, ldb, n, k int, dst []float32) {
	p := 0
	for ; p+4 <= k; p += 4 {
		d0, d1, d2, d3 := dst[p*n:][:n], dst[(p+1)*n:][:n], dst[(p+2)*n:][:n], dst[(p+3)*n:][:n]
		for j := range d0 {
			r := (*[4]float32)(b[j*ldb+p:])
			d0[j], d1[j], d2[j], d3[j] = r[0], r[1], r[2], r[3]
		}
	}
	for ; p < k; p++ {
		d := dst[p*n:][:n]
		for j := range d {
			d[j] = b[j*ldb+p]
		}
	}
}

var packPool = sync.Pool{New: func() any { return new([]float32) }}

func getBuf(n int) *[]float32 {
	p := packPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// loopFunc runs fn over [0, n): par.For, or serial for callers that already
// run one product per core.
type loopFunc func(n, minChunk int, fn func(lo, hi int))

func serial(n, _ int, fn func(lo, hi int)) { fn(0, n) }

// Sgemm is the fast float32 GEMM, with Ref's arguments and meaning.
func Sgemm(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemm(par.For, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func sgemm(loop loopFunc, ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if m < smallM && tb && (k >= smallK || n <= dotN && k >= 2*dotN) {
		scaleC(m, n, beta, c, ldc)
		smallGemm(loop, ta, m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	if m < smallM && !ta && tb && k <= thinK && n >= 8 {
		scaleC(m, n, beta, c, ldc)
		bt := getBuf(k * n)
		transpose(b, ldb, n, k, *bt)
		rowAxpyGemm(m, n, k, alpha, a, lda, *bt, n, c, ldc)
		packPool.Put(bt)
		return
	}
	if m < smallM && !ta && !tb && n <= 8*nr {
		scaleC(m, n, beta, c, ldc)
		rowAxpyGemm(m, n, k, alpha, a, lda, b, ldb, c, ldc)
		return
	}
	// The tile paths write C in their first k block when beta is 0 (see
	// panelTiles), so only another beta scales it first.
	set := beta == 0
	if !set {
		scaleC(m, n, beta, c, ldc)
	}
	if n <= narrowN && m >= 2*mr {
		narrowGemm(loop, ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc, set)
		return
	}
	bufB := getBuf(kc * ((min(n, nc) + nr - 1) / nr * nr))
	defer packPool.Put(bufB)
	blocked(loop, ta, m, n, k, alpha, a, lda, c, ldc, set, func(jc, pc, kb int) []float32 {
		nb := min(nc, n-jc)
		panels := (nb + nr - 1) / nr
		pb := (*bufB)[:panels*nr*kb]
		loop(panels, 8, func(lo, hi int) {
			packPanels(tb, b, ldb, pc, kb, jc, nb, lo, hi, pb)
		})
		return pb
	})
}

// narrowN is the output width up to which A is read in place instead of
// packed. A packed element of A serves n multiply-adds, so for LoRA's rank-r
// products (n = r) packing the activations cost as much as multiplying them.
const narrowN = 2 * nr

// narrowGemm serves products with a narrow op(B) (n <= narrowN): B, small,
// is packed whole with alpha folded in; A is read where it lies, six rows at
// a time; leftover rows go through a packed edge tile.
func narrowGemm(loop loopFunc, ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, set bool) {
	panels := (n + nr - 1) / nr
	buf := getBuf(panels * nr * k)
	defer packPool.Put(buf)
	pb := *buf // per kc block at offset pc·panels·nr: panels of kb×nr
	for pc := 0; pc < k; pc += kc {
		kb := min(kc, k-pc)
		dst := pb[pc*panels*nr : (pc+kb)*panels*nr]
		packPanels(tb, b, ldb, pc, kb, 0, n, 0, panels, dst)
		if alpha != 1 {
			for i := range dst {
				dst[i] *= alpha
			}
		}
	}
	j := narrowJob{ta: ta, m: m, n: n, k: k, panels: panels, a: a, lda: lda, src: inPlace(ta, a, lda), pb: pb, c: c, ldc: ldc, set: set}
	full := m / mr
	if full < 2*4 { // too few blocks for par.For to share: no closure to allocate
		for blk := 0; blk < full; blk++ {
			j.block(blk*mr, nil)
		}
	} else {
		shared := j
		loop(full, 4, func(lo, hi int) {
			for blk := lo; blk < hi; blk++ {
				shared.block(blk*mr, nil)
			}
		})
	}
	if full*mr < m {
		// A stack array here was cleared on every block, whole tiles too:
		// 6 KiB each, 85 times for a LoRA product of 512 rows.
		ap := getBuf(mr * kc)
		j.block(full*mr, *ap)
		packPool.Put(ap)
	}
}

// narrowJob is one narrowGemm product: op(A) [m, k] read in place (src),
// B packed whole into pb, C [m, n]. A struct, not a closure: a closure
// capturing all this was allocated on every call (a small model's forward
// makes dozens), and the tiny-model submissions of the API benchmark spent
// a twelfth of their allocation there.
type narrowJob struct {
	ta      bool
	m, n, k int
	panels  int
	a       []float32
	lda     int
	src     aBlock
	pb, c   []float32
	ldc     int
	set     bool // beta 0: the first k block writes C
}

// block multiplies the six rows from i0; ap is room to pack them when they
// are the edge tile (fewer rows), nil for a whole tile read in place.
func (j *narrowJob) block(i0 int, ap []float32) {
	for pc := 0; pc < j.k; pc += kc {
		kb := min(kc, j.k-pc)
		blk, rows := j.src.from(i0, pc), mr
		if ap != nil {
			rows = j.m - i0
			packA(j.ta, j.a, j.lda, i0, rows, pc, kb, 1, ap[:mr*kb])
			blk = aBlock{a: ap[:mr*kb]}
		}
		base := pc * j.panels * nr
		for q := 0; q < j.panels; q++ {
			bp := j.pb[base+q*nr*kb : base+(q+1)*nr*kb]
			panelTiles(blk, bPanel{f: bp}, j.c, j.ldc, i0, rows, q*nr, kb, min(nr, j.n-q*nr), &bp[0], j.set && pc == 0, nil)
		}
	}
}

// blocked is the packed GEMM's loop nest (BLIS order). panelsOf returns the
// packed B panels of the block at (jc, pc), kb deep: packed on the spot, or
// taken from a weight packed once (Packed).
// set: beta is 0 and C was not cleared, so the first k block writes it.
func blocked(loop loopFunc, ta bool, m, n, k int, alpha float32, a []float32, lda int, c []float32, ldc int, set bool, panelsOf func(jc, pc, kb int) []float32) {
	blocks := (m + mc - 1) / mc
	for jc := 0; jc < n; jc += nc {
		panels := (min(nc, n-jc) + nr - 1) / nr
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			pb := panelsOf(jc, pc, kb)
			if blocks >= 2*par.Workers() {
				// Many row blocks: each worker packs and multiplies its own,
				// so packing A runs in parallel too. Workers split the rows
				// evenly, in whole micro-tiles, and block their share: split
				// by whole blocks, 512 rows went 288/224.
				tiles := (m + mr - 1) / mr
				loop(tiles, mc/mr, func(lo, hi int) {
					bufA := getBuf(mc * kc)
					defer packPool.Put(bufA)
					end := min(hi*mr, m)
					for ic := lo * mr; ic < end; ic += mc {
						mb := min(mc, end-ic)
						pa := (*bufA)[:(mb+mr-1)/mr*mr*kb]
						packA(ta, a, lda, ic, mb, pc, kb, alpha, pa)
						macroKernel(pa, pb, c, ldc, ic, mb, jc, kb, n, 0, panels, set && pc == 0)
					}
				})
				continue
			}
			// Few row blocks (decode rows, or LoRA's rank-r products): share
			// each packed block and split the column panels.
			bufA := getBuf(mc * kc)
			for ic := 0; ic < m; ic += mc {
				mb := min(mc, m-ic)
				pa := (*bufA)[:(mb+mr-1)/mr*mr*kb]
				packA(ta, a, lda, ic, mb, pc, kb, alpha, pa)
				loop(panels, par.MinChunk(nr*mb*kb, 4), func(lo, hi int) {
					macroKernel(pa, pb, c, ldc, ic, mb, jc, kb, n, lo, hi, set && pc == 0)
				})
			}
			packPool.Put(bufA)
		}
	}
}

// macroKernel multiplies a packed A block (mb rows at ic) by packed B panels
// [qlo, qhi) of the block at jc, adding into C.
func macroKernel(pa, pb, c []float32, ldc, ic, mb, jc, kb, n, qlo, qhi int, set bool) {
	for q := qlo; q < qhi; q++ {
		bp := pb[q*nr*kb : (q+1)*nr*kb]
		// The first tile of each panel pulls the next panel toward L1, so
		// weights streaming from memory (few rows, packed weights) arrive
		// while this panel is multiplied.
		next := &bp[0]
		if q+1 < qhi {
			next = &pb[(q+1)*nr*kb]
		}
		panelTiles(aBlock{a: pa}, bPanel{f: bp}, c, ldc, ic, mb, jc+q*nr, kb, min(nr, n-jc-q*nr), next, set, nil)
	}
}

// aBlock is a block of op(A)'s rows as the tile kernels read it: packed
// ([rows/mr panels][kb][mr], so the tile of rows from ir starts at ir·kb),
// or in place, element (i, p) at a[i·rs + p·cs].
type aBlock struct {
	a      []float32
	rs, cs int // zero when packed
}

// inPlace reads op(A) where it lies: rows of a row-major a, or columns of a
// stored transposed (ta).
func inPlace(ta bool, a []float32, lda int) aBlock {
	if ta {
		return aBlock{a, 1, lda}
	}
	return aBlock{a, lda, 1}
}

// from is the in-place block whose element (0, 0) is this one's (i0, p0).
func (b aBlock) from(i0, p0 int) aBlock {
	b.a = b.a[i0*b.rs+p0*b.cs:]
	return b
}

// tileAt returns the tile of rows from ir: where it starts and its strides.
func (b aBlock) tileAt(ir, kb int) ([]float32, int, int) {
	if b.rs == 0 {
		return b.a[ir*kb:], 1, mr
	}
	return b.a[ir*b.rs:], b.rs, b.cs
}

// panelTiles multiplies a block of A (mb rows at ic) by one packed B panel
// (columns j0, nw of them wide), adding into C. Its tiles share the touching
// of next, the panel the caller reads after this one, a slice each: bunched
// into the first tile, the loads of a panel streaming from memory queued up
// behind each other while the other tiles' time went unused. A packed
// block's tiles are its 6-row panels, the last one run by the kernel of its
// height (4 for fewer rows: the panel is padded); edge tiles go through a
// local tile so the kernel always writes whole rows. An in-place block must
// hold every row a kernel reads, so its rows must cut into tiles of 4 to 6
// (inPlaceRows); they are cut as evenly as they go. set writes the products
// over C instead of adding them: a product with beta 0 sets C in its first
// k block rather than clearing it first, a serial pass over all of C while
// the other cores wait (~2.5% of a 16-stream decode step). sec (nil: none)
// is a second source every tile adds before it stores, its rows from the
// block's first (in place, and so is ab).
func panelTiles(ab aBlock, b bPanel, c []float32, ldc, ic, mb, j0, kb, nw int, next *float32, set bool, sec *second) {
	if mb <= 0 {
		return
	}
	tiles := (mb + mr - 1) / mr
	even, longer := mb/tiles, mb%tiles // in place: the first longer tiles have even+1 rows, the rest even
	// Bytes of next a k step: a 64-byte row of it over all the tiles. More
	// (64·mr/mb was: 96 bytes a k step for 8 rows cut 4+4) runs past the
	// next panel, and the extra misses take the line fill buffers that the
	// next panel's lines need (a few-row product reads its weights at what
	// those buffers allow).
	// A 16-bit panel's rows are half as long.
	rowBytes := 64
	if b.h != nil {
		rowBytes = 32
	}
	pstep := max(4, (rowBytes+tiles-1)/tiles)
	for t, ir, mw := 0, 0, 0; ir < mb; t, ir = t+1, ir+mw {
		mw = min(mr, mb-ir)
		if ab.rs != 0 {
			mw = even
			if t < longer {
				mw++
			}
		}
		rows := max(mw, 4)
		a, rs, cs := ab.tileAt(ir, kb)
		cOff := (ic+ir)*ldc + j0
		poff := t * pstep * kb
		var s2 *second
		if sec != nil {
			own := *sec // this tile's rows of it
			own.a = sec.a[ir*sec.rs:]
			s2 = &own
		}
		if nw == nr && mw == rows {
			b.tile(rows, kb, a, rs, cs, c[cOff:], ldc, next, poff, pstep, set, s2)
		} else {
			var edge [mr * nr]float32
			b.tile(rows, kb, a, rs, cs, edge[:], nr, next, poff, pstep, true, s2)
			for i := 0; i < mw; i++ {
				row := c[cOff+i*ldc : cOff+i*ldc+nw]
				if set {
					copy(row, edge[i*nr:])
					continue
				}
				for j := range row {
					row[j] += edge[i*nr+j]
				}
			}
		}
	}
}

// bPanel is one packed panel's k block as the tile kernels read it:
// float32 values (f), or 16-bit ones (h) that kern's tile kernels widen
// in registers.
type bPanel struct {
	f    []float32
	h    []uint16
	kern *halfKernels
}

// tile is the package's tile over b.
func (b bPanel) tile(rows, k int, a []float32, rs, cs int, c []float32, ldc int, next *float32, poff, pstep int, set bool, sec *second) {
	if b.h != nil {
		b.kern.tile(rows, k, a, rs, cs, b.h, c, ldc, next, poff, pstep, set, sec)
		return
	}
	tile(rows, k, a, rs, cs, b.f, c, ldc, next, poff, pstep, set, sec)
}

func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	if beta == 0 && ldc == n { // one clear: a tiny model's products clear C a few dozen floats a row
		clear(c[:m*n]) // also clears NaN, as BLAS does for beta 0
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row) // also clears NaN, as BLAS does for beta 0
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// inPlaceRows reports whether m rows read in place cut into tiles of 4 to 6
// rows, ceil(m/mr) of them: 16 decode rows go 6+5+5, each tile with ten or
// more accumulators.
func inPlaceRows(m int) bool { return m >= 4*((m+mr-1)/mr) }

// packA copies alpha·op(A)[i0:i0+mb, p0:p0+kb] into mr-row panels laid out
// p-major (dst[panel][p][i]), zero-padding the last panel. Each layout gets
// its own loop so the copy streams: packing is pure memory traffic and, done
// element by element with branches, costs a fifth of a whole GEMM.
func packA(ta bool, a []float32, lda, i0, mb, p0, kb int, alpha float32, dst []float32) {
	for ir := 0; ir < mb; ir += mr {
		panel := dst[ir*kb : ir*kb+mr*kb]
		rows := min(mr, mb-ir)
		if rows < mr {
			clear(panel)
		}
		switch {
		case ta && rows == mr: // op(A) row i is column i of a: six contiguous values per p
			for p := 0; p < kb; p++ {
				src := a[(p0+p)*lda+i0+ir : (p0+p)*lda+i0+ir+mr]
				o := panel[p*mr : p*mr+mr]
				o[0], o[1], o[2], o[3], o[4], o[5] = src[0], src[1], src[2], src[3], src[4], src[5]
			}
		case ta:
			for p := 0; p < kb; p++ {
				for i := 0; i < rows; i++ {
					panel[p*mr+i] = a[(p0+p)*lda+i0+ir+i]
				}
			}
		case rows == mr: // six row streams in, one sequential stream out
			base := (i0+ir)*lda + p0
			r0, r1, r2 := a[base:base+kb], a[base+lda:base+lda+kb], a[base+2*lda:base+2*lda+kb]
			r3, r4, r5 := a[base+3*lda:base+3*lda+kb], a[base+4*lda:base+4*lda+kb], a[base+5*lda:base+5*lda+kb]
			for p := 0; p < kb; p++ {
				o := panel[p*mr : p*mr+mr]
				o[0], o[1], o[2], o[3], o[4], o[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
			}
		default:
			for i := 0; i < rows; i++ {
				src := a[(i0+ir+i)*lda+p0 : (i0+ir+i)*lda+p0+kb]
				for p, v := range src {
					panel[p*mr+i] = v
				}
			}
		}
		if alpha != 1 {
			for q := range panel {
				panel[q] *= alpha
			}
		}
	}
}

// packPanels packs panels [lo, hi) of op(B)[p0:p0+kb, j0:j0+nb] into dst,
// panel q at dst[q·nr·kb:], each as packB lays it out. A row-major op(B)
// (tb false) is read row by row across all the whole panels, so the reads
// stream; panel by panel, each 64-byte piece came from another row.
func packPanels[T float32 | uint16](tb bool, b []T, ldb, p0, kb, j0, nb, lo, hi int, dst []T) {
	if !tb {
		full := min(hi, nb/nr) // panels with all nr columns
		for p := 0; p < kb && lo < full; p++ {
			row := b[(p0+p)*ldb+j0:]
			for q := lo; q < full; q++ {
				*(*[nr]T)(dst[q*nr*kb+p*nr:]) = [nr]T(row[q*nr:])
			}
		}
		lo = max(lo, full)
	}
	for q := lo; q < hi; q++ {
		packB(tb, b, ldb, p0, kb, j0+q*nr, min(nr, nb-q*nr), dst[q*nr*kb:(q+1)*nr*kb])
	}
}

// packB copies op(B)[p0:p0+kb, j0:j0+nw] into one nr-column panel laid out
// p-major (dst[p][j]), zero-padding missing columns.
func packB[T float32 | uint16](tb bool, b []T, ldb, p0, kb, j0, nw int, dst []T) {
	dst = dst[:kb*nr]
	if !tb {
		for p := 0; p < kb; p++ {
			out := dst[p*nr : p*nr+nr]
			copy(out, b[(p0+p)*ldb+j0:(p0+p)*ldb+j0+nw])
			clear(out[nw:])
		}
		return
	}
	if nw < nr {
		clear(dst)
	}
	// Four source rows at a time: four read streams, one pass over dst.
	j := 0
	for ; j+4 <= nw; j += 4 {
		base := (j0+j)*ldb + p0
		s0, s1, s2, s3 := b[base:base+kb], b[base+ldb:base+ldb+kb], b[base+2*ldb:base+2*ldb+kb], b[base+3*ldb:base+3*ldb+kb]
		for p := 0; p < kb; p++ {
			o := dst[p*nr+j : p*nr+j+4]
			o[0], o[1], o[2], o[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; j < nw; j++ {
		src := b[(j0+j)*ldb+p0 : (j0+j)*ldb+p0+kb]
		for p, v := range src {
			dst[p*nr+j] = v
		}
	}
}

// rowAxpyGemm serves few rows times a narrow row-major op(B) (decode
// attention's probabilities times values): each output row gathers k scaled
// rows of B, which stay in cache, with no packing; 64-column strips keep
// their sums in registers, 8-column strips the rest of a multiple of 8,
// and a B narrower than 64 columns goes eight rows and columns at a time.
func rowAxpyGemm(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	i := 0
	if n < 64 { // narrower than one 64-column strip: blocks of eight rows and columns
		for full := n &^ 7; i+8 <= m && full > 0; i += 8 {
			j := 0
			for j < full && rows8x8(k, alpha, a[i*lda:], lda, b[j:], ldb, c[i*ldc+j:], ldc) {
				j += 8
			}
			for r := i; r < i+8 && j < n; r++ { // the columns after the last eight
				for p, av := range a[r*lda : r*lda+k] {
					Axpy(alpha*av, b[p*ldb+j:p*ldb+n], c[r*ldc+j:r*ldc+n])
				}
			}
		}
	}
	for ; i < m; i++ {
		crow, arow := c[i*ldc:i*ldc+n], a[i*lda:i*lda+k]
		j := rowStrips(alpha, arow, b, ldb, n, crow)
		if j == n {
			continue
		}
		for p, av := range arow {
			if av != 0 {
				Axpy(alpha*av, b[p*ldb+j:p*ldb+n], crow[j:])
			}
		}
	}
}

// smallGemm serves few-row products against a row-major [n,k] op(B) (a weight
// matrix): each output is a dot product of contiguous rows, so the weight
// streams from memory once with no packing.
func smallGemm(loop loopFunc, ta bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	rows := a
	if ta { // gather op(A) rows contiguously; m is small
		buf := make([]float32, m*k)
		for i := 0; i < m; i++ {
			for p := 0; p < k; p++ {
				buf[i*k+p] = a[p*lda+i]
			}
		}
		rows, lda = buf, k
	}
	quads, chunk := (n+3)/4, par.MinChunk(4*m*k, 16)
	if quads < 2*chunk { // one core's work (decode attention's scores): no closure to allocate
		smallQuads(0, quads, m, n, k, alpha, rows, lda, b, ldb, c, ldc)
		return
	}
	loop(quads, chunk, func(lo, hi int) { smallQuads(lo, hi, m, n, k, alpha, rows, lda, b, ldb, c, ldc) })
}

// smallQuads computes smallGemm's output columns [4·lo, 4·hi).
func smallQuads(lo, hi, m, n, k int, alpha float32, rows []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	full := min(hi, n/4) // quads [lo, full) have all four columns
	i := 0
	if full > lo {
		// Pairs of rows share each weight load (decode batches), every
		// full quad in one call.
		for ; i+2 <= m; i += 2 {
			dots4x2(rows[i*lda:i*lda+k], rows[(i+1)*lda:(i+1)*lda+k], b[4*lo*ldb:], ldb, full-lo, alpha,
				c[i*ldc+4*lo:], c[(i+1)*ldc+4*lo:])
		}
	}
	var out [4]float32
	for q := lo; q < hi; q++ {
		j0, r := q*4, 0
		if q < full {
			r = i // the pairs have these columns
		}
		for ; r < m; r++ {
			x := rows[r*lda : r*lda+k]
			crow := c[r*ldc:]
			if j0+4 <= n {
				dot4(x, b[j0*ldb:], ldb, &out)
				for t := 0; t < 4; t++ {
					crow[j0+t] += alpha * out[t]
				}
				continue
			}
			for j := j0; j < n; j++ {
				crow[j] += alpha * dot(x, b[j*ldb:j*ldb+k])
			}
		}
	}
}
