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

// halfKernelSets are kernelSets and, where those are assembly, the
// portable kernels too: the 16-bit types' Go twins.
func halfKernelSets() []kernelSet {
	sets := kernelSets()
	if startAVX {
		sets = append(sets, kernelSet{"portable", func() { useAVX, useF16C, useAVX512 = false, false, false }})
	}
	return sets
}

var startAVX, startF16C, startAVX512 = useAVX, useF16C, useAVX512

func restoreKernels() { useAVX, useF16C, useAVX512 = startAVX, startF16C, startAVX512 }
