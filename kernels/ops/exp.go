package ops

import "math"

// ExpSlice sets dst[i] = e^src[i] (dst may be src). float32 runs eight lanes
// at a time (AVX2) through exp32's algorithm, the exp that the fused vector
// kernels (softmax's shifted exp-sum, SwiGLU) share; the float64 reference
// path keeps math.Exp.
func ExpSlice[F Float](dst, src []F) {
	if d, ok := any(dst).([]float32); ok {
		exp32Slice(d, any(src).([]float32))
		return
	}
	for i, x := range src[:len(dst)] {
		dst[i] = F(math.Exp(float64(x)))
	}
}

// exp32 is e^x for float32 within 3 ulp (Horner in float32 rounds at each step): x = n·ln2 + r with |r| ≤ ln2/2
// (ln2 split in two for an exact product), e^r by its degree-6 Taylor
// polynomial, and 2^n put straight into the exponent bits. Results below
// float32's normal range flush to zero, which softmax never notices.
func exp32(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	if x > 88.72283 {
		return float32(math.Inf(1))
	}
	if x < -87.33654 || x != x {
		if x != x {
			return x
		}
		return 0
	}
	fn := x*log2e + 0.5
	n := int32(fn)
	if fn < 0 {
		n-- // floor for negatives
	}
	nf := float32(n)
	r := x - nf*ln2hi - nf*ln2lo
	p := 1 + r*(1+r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	if n < -126 { // p·2^n is subnormal-adjacent: scale in two steps
		return p * math.Float32frombits(uint32(n+127+64)<<23) * math.Float32frombits(uint32(127-64)<<23)
	}
	return math.Float32frombits(math.Float32bits(p) + uint32(n)<<23)
}

// expShiftSum sets row[i] = e^(row[i] − shift) and returns their sum, taken
// in float64.
func expShiftSum[F Float](row []F, shift F) float64 {
	if r, ok := any(row).([]float32); ok {
		sh := any(shift).(float32)
		body, s := expShiftSumBody(r, sh)
		for i := body; i < len(r); i++ {
			r[i] = exp32(r[i] - sh)
			s += float64(r[i])
		}
		return s
	}
	var s float64
	for i, v := range row {
		row[i] = F(math.Exp(float64(v - shift)))
		s += float64(row[i])
	}
	return s
}

// maxOf is the largest value of a non-empty row. The vector body does not
// carry NaN through; the exp sums that follow every use of it do.
func maxOf[F Float](row []F) F {
	body := 0
	mx := row[0]
	if r, ok := any(row).([]float32); ok {
		var m float32
		if body, m = maxBody(r); body > 0 {
			mx = F(m)
		}
	}
	for _, v := range row[body:] {
		mx = max(mx, v)
	}
	return mx
}
