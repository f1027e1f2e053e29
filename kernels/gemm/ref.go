// Package gemm multiplies matrices: C = alpha·op(A)·op(B) + beta·C, row-major,
// as BLAS's sgemm does. Ref is the plain definition every fast path is tested
// against; Sgemm is the fast float32 path; Gemm picks one by element type.
package gemm

import "github.com/wts-project/wts/kernels/par"

// Float is the element type of the kernels: float32 in service, float64 for
// finite-difference gradient checks.
type Float interface{ float32 | float64 }

// Ref is the textbook triple loop, accumulating in float64.
//
// op(A) is [m,k]: A[i,p] is a[i*lda+p], or a[p*lda+i] when ta.
// op(B) is [k,n]: B[p,j] is b[p*ldb+j], or b[j*ldb+p] when tb.
// C is [m,n] with row stride ldc.
func Ref[F Float](ta, tb bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if ta {
					ai = p*lda + i
				}
				if tb {
					bi = j*ldb + p
				}
				s += float64(a[ai]) * float64(b[bi])
			}
			prev := F(0)
			if beta != 0 {
				prev = beta * c[i*ldc+j]
			}
			c[i*ldc+j] = alpha*F(s) + prev
		}
	}
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C with the fastest path for F.
func Gemm[F Float](ta, tb bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	gemmWith(par.For, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Serial is Gemm on the calling goroutine only, for kernels that already run
// one product per core (attention heads).
func Serial[F Float](ta, tb bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	gemmWith(serial, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func gemmWith[F Float](loop loopFunc, ta, tb bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	switch av := any(a).(type) {
	case []float32:
		sgemm(loop, ta, tb, m, n, k, float32(alpha), av, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	default:
		Ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}
