//go:build amd64 && !purego

package ops

import (
	"math"

	"golang.org/x/sys/cpu"
)

var expUseAVX = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func expAVX(dst, src *float32, n int)

// exp32Slice sets dst[i] = e^src[i], eight lanes at a time.
func exp32Slice(dst, src []float32) {
	n := len(src)
	dst = dst[:n]
	body := 0
	if expUseAVX {
		body = n &^ 7
		if body > 0 {
			expAVX(&dst[0], &src[0], body)
		}
	}
	for i := body; i < n; i++ {
		dst[i] = exp32(src[i])
	}
}

//go:noescape
func expShiftSumAVX(x *float32, n int, shift float32) float64

//go:noescape
func maxAVX(x *float32, n int) float32

//go:noescape
func softmaxAVX(x *float32, n int) (mx float32, sum float64)

// softmaxBody is normalize on the vector unit, for a non-empty row: one
// call where an attention row of a short sequence took a scalar max, two
// exp calls (its body and a padded tail) and a scalar scaling loop.
func softmaxBody(x []float32) (ok bool, mx float32, sum float64) {
	if !expUseAVX || len(x) == 0 {
		return false, 0, 0
	}
	mx, sum = softmaxAVX(&x[0], len(x))
	return true, mx, sum
}

// expShiftSumBody does expShiftSum on the vector unit and returns how many
// values it did and their sum: all of them, the last few (fewer than eight)
// through a block padded with −Inf, whose exps are zero. Attention rows of a
// short sequence (1 to 16 positions at the tiny model's 16 tokens) are
// mostly such a tail, and the scalar exp took a third of their softmax.
func expShiftSumBody(x []float32, shift float32) (int, float64) {
	if !expUseAVX || len(x) == 0 {
		return 0, 0
	}
	body := len(x) &^ 7
	var s float64
	if body > 0 {
		s = expShiftSumAVX(&x[0], body, shift)
	}
	if tail := x[body:]; len(tail) > 0 {
		pad := [8]float32{}
		n := copy(pad[:], tail)
		for i := n; i < len(pad); i++ {
			pad[i] = float32(math.Inf(-1))
		}
		s += expShiftSumAVX(&pad[0], len(pad), shift)
		copy(tail, pad[:n])
	}
	return len(x), s
}

// maxBody returns the largest of x's whole multiples of 32 values and how
// many those are.
func maxBody(x []float32) (int, float32) {
	body := len(x) &^ 31
	if !expUseAVX || body == 0 {
		return 0, 0
	}
	return body, maxAVX(&x[0], body)
}

//go:noescape
func swigluAVX(a, gt, u *float32, n int)

//go:noescape
func swigluBackAVX(dg, du, da, gt, u *float32, n int)

// swigluBody does SwiGLU's whole multiples of eight and returns how many.
func swigluBody(a, g, u []float32) int {
	body := len(g) &^ 7
	if !expUseAVX || body == 0 {
		return 0
	}
	_, _ = a[body-1], u[body-1]
	swigluAVX(&a[0], &g[0], &u[0], body)
	return body
}

// swigluBackBody does SwiGLUBackward's whole multiples of eight and returns
// how many.
func swigluBackBody(dg, du, da, g, u []float32) int {
	body := len(g) &^ 7
	if !expUseAVX || body == 0 {
		return 0
	}
	_, _, _, _ = dg[body-1], du[body-1], da[body-1], u[body-1]
	swigluBackAVX(&dg[0], &du[0], &da[0], &g[0], &u[0], body)
	return body
}
