//go:build !amd64 || purego

package gemm

func kernel6x16(k int, a, b, c []float32, ldc int) { kernel6x16Go(k, a, b, c, ldc) }

func dot4(x, w []float32, ldw int, out *[4]float32) { dot4Go(x, w, ldw, out) }

func dot(x, y []float32) float32 { return dotGo(x, y) }
