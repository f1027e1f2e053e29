//go:build amd64 && !purego

package ops

//go:noescape
func sumSquaresAVX(x *float32, n int) float64

//go:noescape
func scaleMulAVX(y, x, w *float32, n int, r float32)

// sumSquaresBody returns Σ x[i]² (in float64) over x's whole multiples of
// eight and how many those are.
func sumSquaresBody(x []float32) (int, float64) {
	body := len(x) &^ 7
	if !expUseAVX || body == 0 {
		return 0, 0
	}
	return body, sumSquaresAVX(&x[0], body)
}

// scaleMulBody sets y[i] = x[i]·r·w[i] over x's whole multiples of eight and
// returns how many.
func scaleMulBody(y, x, w []float32, r float32) int {
	body := len(x) &^ 7
	if !expUseAVX || body == 0 {
		return 0
	}
	_, _ = y[body-1], w[body-1]
	scaleMulAVX(&y[0], &x[0], &w[0], body, r)
	return body
}
