package main

import "github.com/wts-project/wts/kernels/gemm"

// stream is the bandwidth peer of single-stream decode: a buffer far larger
// than the caches, read once per pass by all cores through the GEMV decode
// would use on a weight of its size.
type stream struct {
	buf, x, out []float32
}

func newStream() *stream {
	// In huge pages, as the model's packed weights are (gemm.Slab): the
	// bound is what the machine streams at its best.
	s := &stream{buf: gemm.HugeFloats(256 << 20 / 4), x: make([]float32, 4096)}
	for i := range s.buf {
		s.buf[i] = 1
	}
	s.out = make([]float32, len(s.buf)/len(s.x))
	return s
}

// measure returns the median read bandwidth of five passes, in GB/s.
func (s *stream) measure() float64 {
	k := len(s.x)
	rows := len(s.buf) / k
	return float64(len(s.buf)*4) / median(5, func() {
		gemm.Sgemm(false, true, 1, rows, k, 1, s.x, k, s.buf, k, 0, s.out, rows)
	}) / 1e9
}
