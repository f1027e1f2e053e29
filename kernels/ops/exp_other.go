//go:build !amd64 || purego

package ops

func exp32Slice(dst, src []float32) {
	for i, x := range src[:len(dst)] {
		dst[i] = exp32(x)
	}
}
