package safetensors

import "math"

// DType names a tensor element type as the safetensors header spells it.
type DType string

// The element types a model folder may hold. A base kept in 16 bits reads
// its weights as that type (File.Narrow); everything else widens to
// float32.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
)

// Size is the width of one element in bytes, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// BF16ToF32 widens a bfloat16 (the top half of a float32) exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds to nearest-even, as torch does; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	rounding := uint32(0x7fff) + (b>>16)&1
	return uint16((b + rounding) >> 16)
}

// rounders round a float32 to each 16-bit type, to nearest even.
var rounders = map[DType]func(float32) uint16{BF16: F32ToBF16, F16: F32ToF16}

// ToHalf rounds each of x to the 16-bit type d, BF16 or F16 (F32ToBF16,
// F32ToF16).
func ToHalf(d DType, x []float32) []uint16 {
	round := rounders[d]
	if round == nil {
		panic("safetensors: " + string(d) + " is not a 16-bit type")
	}
	h := make([]uint16, len(x))
	for i, v := range x {
		h[i] = round(v)
	}
	return h
}

// F16ToF32 widens an IEEE half exactly, subnormals included.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = mant * 2^-24.
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 rounds to nearest-even; overflow goes to infinity.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		// Subnormal half: shift the full significand into place and round.
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & ((1 << shift) - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right result
	}
	return sign | uint16(r)
}
