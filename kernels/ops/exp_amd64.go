//go:build amd64 && !purego

package ops

import "golang.org/x/sys/cpu"

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
