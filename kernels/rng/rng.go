// Package rng is the project's deterministic random source.
//
// Adapters, generated models and seeded sampling must give the same numbers on
// every machine and every Go release, so the generator is spelled out here
// (SplitMix64 seeding a xoshiro256** state) instead of borrowed from math/rand,
// whose derived-value methods are not promised to stay fixed. Floats come from
// integer bits alone, with no transcendental functions, so they are exact.
package rng

// Source is a xoshiro256** generator. The zero value is not valid: use New.
type Source struct{ s [4]uint64 }

// New seeds a Source from one 64-bit seed with SplitMix64, as the xoshiro
// authors recommend.
func New(seed uint64) *Source {
	var r Source
	x := seed
	for i := range r.s {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		r.s[i] = z ^ (z >> 31)
	}
	return &r
}

func rotl(x uint64, k uint) uint64 { return (x << k) | (x >> (64 - k)) }

// Uint64 returns the next 64 random bits.
func (r *Source) Uint64() uint64 {
	s := &r.s
	out := rotl(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = rotl(s[3], 45)
	return out
}

// Float64 returns a uniform value in [0, 1) with 53 random bits.
func (r *Source) Float64() float64 {
	return float64(r.Uint64()>>11) * (1.0 / (1 << 53))
}

// Uniform returns a uniform value in [lo, hi).
func (r *Source) Uniform(lo, hi float64) float64 {
	return lo + (hi-lo)*r.Float64()
}

// Derive returns an independent stream for a sub-task (one tensor, one
// sequence) so that the numbers one part draws do not depend on how many
// numbers other parts drew first.
func Derive(seed uint64, parts ...uint64) *Source {
	h := seed ^ 0x6a09e667f3bcc909
	for _, p := range parts {
		h = mix(h ^ mix(p+0x9e3779b97f4a7c15))
	}
	return New(h)
}

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// HashString folds a name into a 64-bit value (FNV-1a) for use with Derive.
func HashString(s string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h
}
