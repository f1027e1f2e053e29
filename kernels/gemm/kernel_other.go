//go:build !amd64 || purego

package gemm

func tile(rows, k int, a []float32, rs, cs int, b, c []float32, ldc int, _ *float32, _, _ int, set bool, sec *second) {
	tileGo(rows, k, a, rs, cs, b, c, ldc, set, sec)
}

func dot4(x, w []float32, ldw int, out *[4]float32) { dot4Go(x, w, ldw, out) }

func dot(x, y []float32) float32 { return dotGo(x, y) }

func gemv16(x, panel []float32, y *[nr]float32) { gemv16Go(x, panel, y) }

func gemv64(x, panels []float32, y *[4 * nr]float32) { gemv64Go(x, panels, y) }

var (
	bf16Kernels = halfKernels{one: gemv16BF16Go, four: gemv64BF16Go, widen: widenBF16Go}
	f16Kernels  = halfKernels{one: gemv16F16Go, four: gemv64F16Go, widen: widenF16Go}
)

// direct is false: without tile kernels of their own, 16-bit panels are
// widened a block at a time for tileGo.
func (k *halfKernels) direct() bool { return false }

// Axpy adds alpha·x into y (y at least as long as x).
func Axpy(alpha float32, x, y []float32) { axpyGo(alpha, x, y) }

func dots4x2(x0, x1, w []float32, ldw, quads int, alpha float32, c0, c1 []float32) {
	dots4x2Go(x0, x1, w, ldw, quads, alpha, c0, c1)
}

// rowStrips has no portable fast form: rowAxpyGemm's axpy loop does it all.
func rowStrips(alpha float32, a, b []float32, ldb, n int, c []float32) int { return 0 }

// rows8x8 has no portable fast form: rowAxpyGemm's rows do it.
func rows8x8(k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) bool {
	return false
}
