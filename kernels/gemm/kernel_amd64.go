//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// useAVX is fixed at start-up: the assembly needs AVX2 and FMA (Haswell on).
var useAVX = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useAVX512 picks the AVX-512 tile kernels, where the CPU and the OS have
// them: twice the multiply-adds a cycle on cores with two 512-bit FMA units,
// which batched decode, prefill and training are bound by. An operator whose
// cores slow down under AVX-512 (some older Xeons) turns them off with
// GODEBUG=cpu.avx512f=off (docs/operations.md). Tests switch it to prove
// both kernel sets on one machine.
var useAVX512 = useAVX && cpu.X86.HasAVX512F

//go:noescape
func tile6x16AVX(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile5x16AVX(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile4x16AVX(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile6x16Z(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile5x16Z(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile4x16Z(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

// tile adds A·B into the rows×16 tile at c (set: writes it over c), rows 4 to 6 (mr), with A's
// element (i, p) at a[i·rs + p·cs]: a packed panel (rs 1, cs mr), rows of a
// row-major matrix read in place (rs lda, cs 1), or columns of one stored
// transposed (rs 1, cs lda). b is a packed panel k deep. Each k step also
// touches the byte poff + p·pstep of next (see panelTiles), so a panel
// streaming from memory arrives while this one is multiplied. sec (nil:
// none) is a second source added into the same sums before they are stored.
func tile(rows, k int, a []float32, rs, cs int, b, c []float32, ldc int, next *float32, poff, pstep int, set bool, sec *second) {
	if !useAVX || k == 0 {
		tileGo(rows, k, a, rs, cs, b, c, ldc, set, sec)
		return
	}
	_ = b[k*nr-1]
	a2, rs2, cs2, b2, k2 := tileArgs(rows, k, a, rs, cs, c, ldc, sec)
	switch {
	case useAVX512 && rows == 4:
		tile4x16Z(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	case useAVX512 && rows == 5:
		tile5x16Z(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	case useAVX512:
		tile6x16Z(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	case rows == 4:
		tile4x16AVX(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	case rows == 5:
		tile5x16AVX(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	default:
		tile6x16AVX(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	}
}

// tileArgs checks the bounds the tile kernels rely on in A and C, once per
// tile, and returns sec's arguments (all zero: none).
func tileArgs(rows, k int, a []float32, rs, cs int, c []float32, ldc int, sec *second) (a2 *float32, rs2, cs2 int, b2 *float32, k2 int) {
	_ = a[(rows-1)*rs+(k-1)*cs]
	_ = c[(rows-1)*ldc+nr-1]
	if sec != nil && sec.k > 0 {
		_ = sec.a[(rows-1)*sec.rs+(sec.k-1)*sec.cs]
		_ = sec.b[sec.k*nr-1]
		a2, rs2, cs2, b2, k2 = &sec.a[0], sec.rs, sec.cs, &sec.b[0], sec.k
	}
	return a2, rs2, cs2, b2, k2
}

// tileAsm16 is the signature of the tile kernels over 16-bit panels.
type tileAsm16 func(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile6x16BF16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile5x16BF16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile4x16BF16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile6x16F16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile5x16F16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

//go:noescape
func tile4x16F16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)

// tile16Of is a 16-bit type's tile16: its AVX2 kernels of four, five and
// six rows.
func tile16Of(four, five, six tileAsm16) tile16 {
	return func(rows, k int, a []float32, rs, cs int, b []uint16, c []float32, ldc int, next *float32, poff, pstep int, set bool, sec *second) {
		if k == 0 {
			tileGo(rows, 0, a, rs, cs, nil, c, ldc, set, sec)
			return
		}
		_ = b[k*nr-1]
		a2, rs2, cs2, b2, k2 := tileArgs(rows, k, a, rs, cs, c, ldc, sec)
		run := six
		switch rows {
		case 4:
			run = four
		case 5:
			run = five
		}
		run(k, &a[0], rs, cs, &b[0], &c[0], ldc, next, poff, pstep, set, a2, rs2, cs2, b2, k2)
	}
}

// direct says whether k's tile kernels take its panels as they lie: on
// AVX2, where widening each panel block into a buffer first cost batched
// decode a sixth of its pace (bench/README.md). The AVX-512 tiles take
// float32 panels, twice as wide, so there the block is widened first.
func (k *halfKernels) direct() bool { return k.tile != nil && *k.on && !useAVX512 }

//go:noescape
func dot4AVX(k int, x, w *float32, ldw int, out *[4]float32)

//go:noescape
func dotAVX(k int, x, y *float32) float32

//go:noescape
func gemv16AVX(k int, x, panel, y *float32)

// gemv16 adds Σ_p x[p]·panel[p][0:16] into y[0:16] (one packed panel).
func gemv16(x, panel []float32, y *[nr]float32) {
	k := len(x)
	body := k &^ 3
	if useAVX && body > 0 {
		_ = panel[k*nr-1]
		gemv16AVX(body, &x[0], &panel[0], &y[0])
	} else {
		body = 0
	}
	for p := body; p < k; p++ {
		for j := 0; j < nr; j++ {
			y[j] += x[p] * panel[p*nr+j]
		}
	}
}

//go:noescape
func gemv64AVX(k int, x, panels *float32, stride int, y *float32)

// gemv64 is gemv16 over four consecutive packed panels of depth len(x) at
// once: panel i's sums go to y[16i : 16i+16].
func gemv64(x, panels []float32, y *[4 * nr]float32) {
	k := len(x)
	if !useAVX || k == 0 {
		gemv64Go(x, panels, y)
		return
	}
	_ = panels[4*k*nr-1]
	gemv64AVX(k, &x[0], &panels[0], 4*k*nr, &y[0])
}

// useF16C adds F16C's conversions, which the IEEE half kernels need (every
// AVX2 CPU has them; the check is for emulators that leave them out).
var useF16C = useAVX && cpu.X86.HasF16C

//go:noescape
func gemv16BF16AVX(k int, x *float32, panel *uint16, y *float32)

//go:noescape
func gemv64BF16AVX(k int, x *float32, panels *uint16, stride int, y *float32)

//go:noescape
func widenBF16AVX(n int, src *uint16, dst *float32)

//go:noescape
func gemv16F16AVX(k int, x *float32, panel *uint16, y *float32)

//go:noescape
func gemv64F16AVX(k int, x *float32, panels *uint16, stride int, y *float32)

//go:noescape
func widenF16AVX(n int, src *uint16, dst *float32)

var (
	bf16Kernels = halfKernels{
		one:   gemv16Of(gemv16BF16AVX, gemv16BF16Go, &useAVX),
		four:  gemv64Of(gemv64BF16AVX, gemv64BF16Go, &useAVX),
		widen: widenOf(widenBF16AVX, widenBF16Go, &useAVX),
		tile:  tile16Of(tile4x16BF16AVX, tile5x16BF16AVX, tile6x16BF16AVX),
		on:    &useAVX,
	}
	f16Kernels = halfKernels{
		one:   gemv16Of(gemv16F16AVX, gemv16F16Go, &useF16C),
		four:  gemv64Of(gemv64F16AVX, gemv64F16Go, &useF16C),
		widen: widenOf(widenF16AVX, widenF16Go, &useF16C),
		tile:  tile16Of(tile4x16F16AVX, tile5x16F16AVX, tile6x16F16AVX),
		on:    &useF16C,
	}
)

// gemv16Of is a 16-bit format's gemv16: its assembly kernel over the
// multiple of 4 deep that it takes, while *on, then its Go twin.
func gemv16Of(asm func(k int, x *float32, panel *uint16, y *float32), twin func([]float32, []uint16, *[nr]float32), on *bool) func([]float32, []uint16, *[nr]float32) {
	return func(x []float32, panel []uint16, y *[nr]float32) {
		k := len(x)
		body := k &^ 3
		if !*on || body == 0 {
			twin(x, panel, y)
			return
		}
		_ = panel[k*nr-1]
		asm(body, &x[0], &panel[0], &y[0])
		twin(x[body:], panel[body*nr:], y)
	}
}

// gemv64Of is a 16-bit format's gemv64 (see gemv16Of).
func gemv64Of(asm func(k int, x *float32, panels *uint16, stride int, y *float32), twin func([]float32, []uint16, *[4 * nr]float32), on *bool) func([]float32, []uint16, *[4 * nr]float32) {
	return func(x []float32, panels []uint16, y *[4 * nr]float32) {
		k := len(x)
		if !*on || k == 0 {
			twin(x, panels, y)
			return
		}
		_ = panels[4*k*nr-1]
		asm(k, &x[0], &panels[0], 2*k*nr, &y[0])
	}
}

// widenOf is a 16-bit format's widen (see gemv16Of): whole panel rows in
// assembly, any rest in Go.
func widenOf(asm func(n int, src *uint16, dst *float32), twin func([]uint16, []float32), on *bool) func([]uint16, []float32) {
	return func(src []uint16, dst []float32) {
		body := len(src) &^ 15
		if *on && body > 0 {
			_ = dst[len(src)-1]
			asm(body, &src[0], &dst[0])
		} else {
			body = 0
		}
		twin(src[body:], dst[body:])
	}
}

//go:noescape
func axpyAVX(n int, alpha float32, x, y *float32)

// Axpy adds alpha·x into y (y at least as long as x), eight lanes at a time.
func Axpy(alpha float32, x, y []float32) {
	n := len(x)
	body := n &^ 7
	if useAVX && body > 0 {
		_ = y[n-1]
		axpyAVX(body, alpha, &x[0], &y[0])
	} else {
		body = 0
	}
	for i := body; i < n; i++ {
		y[i] += alpha * x[i]
	}
}

//go:noescape
func dots4x2AVX(k int, x0, x1, w *float32, ldw, quads int, alpha float32, c0, c1 *float32)

// dots4x2 adds alpha·(x0·w_j) into c0[j] and alpha·(x1·w_j) into c1[j]
// for the 4·quads rows w_j = w[j·ldw:] (len(x0) long), four rows at a time.
func dots4x2(x0, x1, w []float32, ldw, quads int, alpha float32, c0, c1 []float32) {
	k := len(x0)
	if !useAVX || k == 0 || k&7 != 0 || quads == 0 {
		dots4x2Go(x0, x1, w, ldw, quads, alpha, c0, c1)
		return
	}
	// Bounds the assembly relies on, checked once.
	_ = x1[k-1]
	_ = w[(4*quads-1)*ldw+k-1]
	_, _ = c0[4*quads-1], c1[4*quads-1]
	dots4x2AVX(k, &x0[0], &x1[0], &w[0], ldw, quads, alpha, &c0[0], &c1[0])
}

func dot4(x, w []float32, ldw int, out *[4]float32) {
	k := len(x)
	if !useAVX || k == 0 {
		dot4Go(x, w, ldw, out)
		return
	}
	_ = w[3*ldw+k-1]
	dot4AVX(k, &x[0], &w[0], ldw, out)
}

func dot(x, y []float32) float32 {
	k := len(x)
	if !useAVX || k == 0 {
		return dotGo(x, y)
	}
	_ = y[k-1]
	return dotAVX(k, &x[0], &y[0])
}

//go:noescape
func rowStrip64AVX(k int, alpha float32, a, b *float32, ldb int, c *float32)

//go:noescape
func rows8x8AVX(k int, alpha float32, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// rows8x8 adds alpha·A·B into the 8×8 block at c (row stride ldc) for A
// [8, k] (stride lda) and B [k, 8] (stride ldb), and reports whether it
// did (false: no AVX, or k 0).
func rows8x8(k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	if !useAVX || k == 0 {
		return false
	}
	// Bounds the assembly relies on, checked once.
	_ = a[7*lda+k-1]
	_ = b[(k-1)*ldb+7]
	_ = c[7*ldc+7]
	rows8x8AVX(k, alpha, &a[0], lda, &b[0], ldb, &c[0], ldc)
	return true
}

//go:noescape
func rowStrip8AVX(k int, alpha float32, a, b *float32, ldb int, c *float32)

// rowStrips adds alpha·a·B[:, 0:n] into c for a [k] and B [k, n] (row stride
// ldb), 64 columns at a time and then 8, and returns how many columns it did.
// The 8-column strips serve narrow B (the tiny model's attention, head dim
// 8), where an axpy per element of a was most of the product's time.
func rowStrips(alpha float32, a, b []float32, ldb, n int, c []float32) int {
	k := len(a)
	if !useAVX || k == 0 || n < 8 {
		return 0
	}
	done := n &^ 7
	_ = b[(k-1)*ldb+done-1]
	_ = c[done-1]
	j := 0
	for ; j+64 <= done; j += 64 {
		rowStrip64AVX(k, alpha, &a[0], &b[j], ldb, &c[j])
	}
	for ; j < done; j += 8 {
		rowStrip8AVX(k, alpha, &a[0], &b[j], ldb, &c[j])
	}
	return done
}
