package gemm

import "github.com/wts-project/wts/kernels/par"

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
type Packed struct {
	N, K   int
	data   []float32
	blocks []int // offset of each kc block
}

// PackT packs B = Wᵀ for w [n, k] (row-major, row stride ldw).
func PackT(w []float32, n, k, ldw int) *Packed { return pack(true, w, n, k, ldw) }

// PackN packs B = W for w [k, n] (row-major, row stride ldw).
func PackN(w []float32, k, n, ldw int) *Packed { return pack(false, w, n, k, ldw) }

func pack(tb bool, w []float32, n, k, ldw int) *Packed {
	panels := (n + nr - 1) / nr
	p := &Packed{N: n, K: k}
	size := 0
	for pc := 0; pc < k; pc += kc {
		p.blocks = append(p.blocks, size)
		size += panels * nr * min(kc, k-pc)
	}
	p.data = make([]float32, size)
	for bi, pc := 0, 0; pc < k; bi, pc = bi+1, pc+kc {
		kb := min(kc, k-pc)
		base := p.data[p.blocks[bi]:]
		par.For(panels, 8, func(lo, hi int) {
			packPanels(tb, w, ldw, pc, kb, 0, n, lo, hi, base)
		})
	}
	return p
}

// Mul computes C = alpha·op(A)·B + beta·C for op(A) [m, K] (A transposed
// when ta), C [m, N].
func (p *Packed) Mul(ta bool, m int, alpha float32, a []float32, lda int, beta float32, c []float32, ldc int) {
	n, k := p.N, p.K
	if m == 0 || n == 0 {
		return
	}
	scaleC(m, n, beta, c, ldc)
	if k == 0 || alpha == 0 {
		return
	}
	if m < packedGemvM && !ta {
		p.gemv(m, alpha, a, lda, c, ldc)
		return
	}
	if m <= mc {
		p.fewRows(ta, m, alpha, a, lda, c, ldc)
		return
	}
	blocked(par.For, ta, m, n, k, alpha, a, lda, c, ldc, func(jc, pc, kb int) []float32 {
		base := p.data[p.blocks[pc/kc]:]
		panels := (min(nc, n-jc) + nr - 1) / nr
		return base[jc*kb : jc*kb+panels*nr*kb]
	})
}

// fewRows serves one block of rows (batched decode: a row per sequence) in
// one parallel region over the column panels, each worker taking every k
// block of a panel before the next: no barrier per k block, and each worker
// reads its weights as k/kc interleaved streams, which draw more bandwidth
// than one. A is read where it lies, so the caller packs nothing while the
// workers wait (packing 16 rows serially was a seventh of a batched decode
// step); only rows after the last whole tile, when they are not a 4-row
// tile, are packed (zero-padded), so that no kernel reads past A.
func (p *Packed) fewRows(ta bool, m int, alpha float32, a []float32, lda int, c []float32, ldc int) {
	n, k := p.N, p.K
	if alpha != 1 {
		buf := scaledRows(ta, m, k, alpha, a, lda)
		defer packPool.Put(buf)
		ta, a, lda = false, *buf, k
	}
	src := inPlace(ta, a, lda)
	whole := m / mr * mr
	if m-whole == 4 {
		whole = m
	}
	var tail []float32 // rows [whole, m): per k block at pc·mr, one packed tile
	if whole < m {
		buf := getBuf(mr * k)
		defer packPool.Put(buf)
		tail = (*buf)[:mr*k]
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			packA(ta, a, lda, whole, m-whole, pc, kb, 1, tail[pc*mr:pc*mr+mr*kb])
		}
	}
	panels := (n + nr - 1) / nr
	par.For(panels, par.MinChunk(nr*m*k, 2), func(lo, hi int) {
		for q := lo; q < hi; q++ {
			nw := min(nr, n-q*nr)
			for bi, pc := 0, 0; pc < k; bi, pc = bi+1, pc+kc {
				kb := min(kc, k-pc)
				bp := p.data[p.blocks[bi]+q*nr*kb:][:nr*kb]
				// The next panel this worker reads: this one in the next
				// k block, or the next one in the first.
				next := &bp[0]
				if pc+kc < k {
					next = &p.data[p.blocks[bi+1]+q*nr*min(kc, k-pc-kc)]
				} else if q+1 < hi {
					next = &p.data[p.blocks[0]+(q+1)*nr*min(kc, k)]
				}
				panelTiles(src.from(0, pc), bp, c, ldc, 0, whole, q*nr, kb, nw, next)
				if tail != nil {
					panelTiles(aBlock{a: tail[pc*mr:]}, bp, c, ldc, whole, m-whole, q*nr, kb, nw, next)
				}
			}
		}
	})
}

// packedGemvM is the row count below which products walk the panels with a
// one-row kernel: the 6-row micro-kernel would compute mostly padding.
const packedGemvM = 4

// gemv serves few rows (single-stream decode): one parallel region; each
// worker takes a range of panels and walks the k blocks outermost, four
// panels at a time, so within a block it reads four sequential streams, the
// access pattern that draws the most bandwidth from memory (one stream alone
// gets about a fifth less). The kernels add straight into C; alpha scales
// the few rows of A instead of every output.
func (p *Packed) gemv(m int, alpha float32, a []float32, lda int, c []float32, ldc int) {
	n, k := p.N, p.K
	if alpha != 1 {
		buf := scaledRows(false, m, k, alpha, a, lda)
		defer packPool.Put(buf)
		a, lda = *buf, k
	}
	panels := (n + nr - 1) / nr
	full := n / nr // panels with all nr columns in C
	par.For(panels, par.MinChunk(nr*m*k, 4), func(lo, hi int) {
		var edge [packedGemvM][nr]float32 // sums of the last, partial panel, per row
		for bi, pc := 0, 0; pc < k; bi, pc = bi+1, pc+kc {
			kb := min(kc, k-pc)
			base := p.data[p.blocks[bi]:]
			for i := 0; i < m; i++ {
				x, y := a[i*lda+pc:i*lda+pc+kb], c[i*ldc:]
				q := lo
				for ; q+4 <= min(hi, full); q += 4 {
					gemv64(x, base[q*nr*kb:(q+4)*nr*kb], (*[4 * nr]float32)(y[q*nr:q*nr+4*nr]))
				}
				for ; q < min(hi, full); q++ {
					gemv16(x, base[q*nr*kb:(q+1)*nr*kb], (*[nr]float32)(y[q*nr:q*nr+nr]))
				}
				if q < hi { // q == full: the partial panel
					gemv16(x, base[q*nr*kb:(q+1)*nr*kb], &edge[i])
				}
			}
		}
		if hi > full {
			for i := 0; i < m; i++ {
				out := c[i*ldc+full*nr : i*ldc+n]
				for j := range out {
					out[j] += edge[i][j]
				}
			}
		}
	})
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
