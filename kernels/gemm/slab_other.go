//go:build !linux

package gemm

// adviseHuge has nothing to ask for here: other systems' large pages need
// privileges or are the OS's own choice.
func adviseHuge([]float32) {}
