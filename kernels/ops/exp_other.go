//go:build !amd64 || purego

package ops

func exp32Slice(dst, src []float32) {
	for i, x := range src[:len(dst)] {
		dst[i] = exp32(x)
	}
}

func expShiftSumBody([]float32, float32) (int, float64) { return 0, 0 }

func maxBody([]float32) (int, float32) { return 0, 0 }

func swigluBody(_, _, _ []float32) int { return 0 }

func swigluBackBody(_, _, _, _, _ []float32) int { return 0 }

func softmaxBody([]float32) (bool, float32, float64) { return false, 0, 0 }
