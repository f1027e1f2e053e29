package gemm

import "unsafe"

// hugePage is the size of a transformer-weight page worth asking the OS for:
// decoding streams every weight once a token, and in 4 KiB pages that is a
// TLB miss every 1,024 floats and a hardware prefetcher that stops at each
// page's end. In 2 MiB pages, few-row decode products ran measurably
// faster, single-row ones a little.
const hugePage = 2 << 20

// HugeFloats returns n zeroed float32s that start on a hugePage boundary and,
// where the OS has transparent huge pages (Linux, THP enabled or madvise),
// are advised to be backed by them. They are ordinary Go memory, collected
// like any slice. For large, long-lived buffers read as streams: the
// alignment costs up to 2 MiB of slack.
func HugeFloats(n int) []float32 {
	if n*4 < hugePage {
		return make([]float32, n)
	}
	slack := hugePage / 4
	buf := make([]float32, n+slack)
	off := (hugePage - int(uintptr(unsafe.Pointer(&buf[0])))%hugePage) % hugePage / 4
	out := buf[off : off+n : off+n]
	adviseHuge(out)
	return out
}

// Slab is one HugeFloats allocation that a model's packed weights are carved
// from, so that they share huge pages instead of each small matrix padding
// its own. The slab lives as long as any matrix packed in it.
type Slab struct {
	rest []float32
}

// NewSlab returns a slab with room for floats values (sum PackedLen over
// what will be packed in it).
func NewSlab(floats int) *Slab { return &Slab{rest: HugeFloats(floats)} }

// PackedLen is the number of floats a packed B [k, n] holds.
func PackedLen(n, k int) int { return (n + nr - 1) / nr * nr * k }

// takeHalf returns the next n 16-bit values of s (n/2 floats' room,
// rounded up), or fresh ones when s is nil or full.
func (s *Slab) takeHalf(n int) []uint16 {
	f := s.take((n + 1) / 2)
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&f[0])), n)
}

// take returns the next n floats of s, or fresh ones when s is nil or full.
func (s *Slab) take(n int) []float32 {
	if s == nil || len(s.rest) < n {
		return make([]float32, n)
	}
	out := s.rest[:n:n]
	s.rest = s.rest[n:]
	return out
}
