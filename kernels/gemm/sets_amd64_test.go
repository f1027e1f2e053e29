//go:build amd64 && !purego

package gemm

// kernelSets names the tile kernel sets this machine can run, each with a
// switch to it; the switch back to the start-up choice is the caller's
// (restoreKernels).
func kernelSets() []kernelSet {
	first := "portable"
	if useAVX {
		first = "avx2"
	}
	sets := []kernelSet{{first, func() { useAVX512 = false }}}
	if startAVX512 {
		sets = append(sets, kernelSet{"avx512", func() { useAVX512 = true }})
	}
	return sets
}

var startAVX512 = useAVX512

func restoreKernels() { useAVX512 = startAVX512 }
