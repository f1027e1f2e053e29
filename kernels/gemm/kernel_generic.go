package gemm

// The portable micro-kernels. On amd64 with AVX2 and FMA the assembly versions
// replace them (kernel_amd64.go); elsewhere, and in tests that compare the two,
// these run.

import "github.com/wts-project/wts/kernels/safetensors"

func dotGo(x, y []float32) float32 {
	var s0, s1, s2, s3 float32
	n := len(x)
	y = y[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < n; i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot4Go computes the dot products of x with four rows of w spaced ldw apart.
func dot4Go(x, w []float32, ldw int, out *[4]float32) {
	k := len(x)
	for t := 0; t < 4; t++ {
		out[t] = dotGo(x, w[t*ldw:t*ldw+k])
	}
}

// dots4x2Go is dots4x2 in plain Go.
func dots4x2Go(x0, x1, w []float32, ldw, quads int, alpha float32, c0, c1 []float32) {
	k := len(x0)
	for j := 0; j < 4*quads; j++ {
		row := w[j*ldw : j*ldw+k]
		c0[j] += alpha * dotGo(x0, row)
		c1[j] += alpha * dotGo(x1, row)
	}
}

func axpyGo(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

func gemv16Go(x, panel []float32, y *[nr]float32) {
	for p, xv := range x {
		row := panel[p*nr : p*nr+nr]
		for j := range row {
			y[j] += xv * row[j]
		}
	}
}

func gemv64Go(x, panels []float32, y *[4 * nr]float32) { fourPanels(gemv16Go, x, panels, y) }

// fourPanels runs one, a one-panel kernel, over four consecutive panels of
// depth len(x), panel i's sums to y[16i : 16i+16].
func fourPanels[T float32 | uint16](one func([]float32, []T, *[nr]float32), x []float32, panels []T, y *[4 * nr]float32) {
	k := len(x)
	for i := 0; i < 4; i++ {
		one(x, panels[i*k*nr:(i+1)*k*nr], (*[nr]float32)(y[i*nr:(i+1)*nr]))
	}
}

// A bf16 panel row holds its nr columns paired, (col i, col i+nr/2) for
// i < nr/2: the layout the AVX2 kernels split without a shuffle (see
// kernel_amd64.s). pairBF16 puts a panel row in columns order into it;
// bf16At reads column j of one.
func pairBF16(row *[nr]uint16) {
	cols := *row
	for i := 0; i < nr/2; i++ {
		row[2*i], row[2*i+1] = cols[i], cols[i+nr/2]
	}
}

func bf16At(row []uint16, j int) float32 {
	if j < nr/2 {
		return safetensors.BF16ToF32(row[2*j])
	}
	return safetensors.BF16ToF32(row[2*(j-nr/2)+1])
}

func widenBF16Go(src []uint16, dst []float32) {
	for r := 0; r+nr <= len(src); r += nr {
		for j := 0; j < nr; j++ {
			dst[r+j] = bf16At(src[r:r+nr], j)
		}
	}
}

func gemv16BF16Go(x []float32, panel []uint16, y *[nr]float32) {
	for p, xv := range x {
		row := panel[p*nr : p*nr+nr]
		for j := range y {
			y[j] += xv * bf16At(row, j)
		}
	}
}

func gemv64BF16Go(x []float32, panels []uint16, y *[4 * nr]float32) {
	fourPanels(gemv16BF16Go, x, panels, y)
}

// An f16 panel row holds its columns in order: F16C converts eight
// consecutive halves at once.
func widenF16Go(src []uint16, dst []float32) {
	for i, h := range src {
		dst[i] = safetensors.F16ToF32(h)
	}
}

func gemv16F16Go(x []float32, panel []uint16, y *[nr]float32) {
	for p, xv := range x {
		row := panel[p*nr : p*nr+nr]
		for j, h := range row {
			y[j] += xv * safetensors.F16ToF32(h)
		}
	}
}

func gemv64F16Go(x []float32, panels []uint16, y *[4 * nr]float32) {
	fourPanels(gemv16F16Go, x, panels, y)
}

// second is a source a tile adds into its sums after its own k steps and
// before it stores them: k steps of A's element (i, p) at a[i·rs + p·cs]
// against the packed panel b. A LoRA term's u·Bᵀ rides on its base
// product's tiles this way (see Term).
type second struct {
	a      []float32
	rs, cs int
	b      []float32
	k      int
}

// tileGo is tile's portable twin: it adds A·B (and sec's product, when not
// nil) into the first rows rows of the tile at c (set: writes it over
// them), A's element (i, p) at a[i·rs + p·cs].
func tileGo(rows, k int, a []float32, rs, cs int, b, c []float32, ldc int, set bool, sec *second) {
	var acc [mr][nr]float32
	accumulate := func(k int, a []float32, rs, cs int, b []float32) {
		for p := 0; p < k; p++ {
			bp := b[p*nr : p*nr+nr]
			for i := 0; i < rows; i++ {
				ai := a[i*rs+p*cs]
				for j := 0; j < nr; j++ {
					acc[i][j] += ai * bp[j]
				}
			}
		}
	}
	accumulate(k, a, rs, cs, b)
	if sec != nil {
		accumulate(sec.k, sec.a, sec.rs, sec.cs, sec.b)
	}
	for i := 0; i < rows; i++ {
		row := c[i*ldc : i*ldc+nr]
		if set {
			copy(row, acc[i][:])
			continue
		}
		for j := range row {
			row[j] += acc[i][j]
		}
	}
}
