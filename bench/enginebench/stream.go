package main

import "github.com/wts-project/wts/kernels/gemm"

// benchSum reads buf once through the same GEMV kernel decode uses: buf is
// viewed as a [rows, len(x)] matrix times x.
func benchSum(buf, x []float32) {
	k := len(x)
	rows := len(buf) / k
	out := make([]float32, rows)
	gemm.Sgemm(false, true, 1, rows, k, 1, x, k, buf, k, 0, out, rows)
}
