//go:build !amd64 || purego

package gemm

func kernelSets() []kernelSet { return []kernelSet{{"portable", func() {}}} }

func restoreKernels() {}

func halfKernelSets() []kernelSet { return kernelSets() }
