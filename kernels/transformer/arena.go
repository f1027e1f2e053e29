package transformer

import "github.com/wts-project/wts/kernels/gemm"

// Arena recycles the buffers of forward and backward passes. A training
// step allocates the same shapes every time, gigabytes of them for larger
// models; fresh allocations cost page faults and zeroing in the kernel and
// garbage collection after, which measured a third of a Qwen3-0.6B step. With
// an arena, steps after the first allocate nothing large (PyTorch's caching
// allocator does the same).
//
// A nil *Arena allocates normally. An Arena is not safe for concurrent use:
// each trainer or sampler call owns its own.
type Arena[F gemm.Float] struct {
	free map[int][][]F
	used [][]F
}

// NewArena returns an empty arena.
func NewArena[F gemm.Float]() *Arena[F] { return &Arena[F]{free: map[int][][]F{}} }

// Alloc returns a zeroed slice of n values.
func (a *Arena[F]) Alloc(n int) []F {
	if a == nil {
		return make([]F, n)
	}
	var s []F
	if list := a.free[n]; len(list) > 0 {
		s = list[len(list)-1]
		a.free[n] = list[:len(list)-1]
		clear(s)
	} else {
		s = make([]F, n)
	}
	a.used = append(a.used, s)
	return s
}

// Clone returns a copy of src from the arena.
func (a *Arena[F]) Clone(src []F) []F {
	s := a.Alloc(len(src))
	copy(s, src)
	return s
}

// Reset takes every buffer back: slices handed out before must no longer be
// used.
func (a *Arena[F]) Reset() {
	if a == nil {
		return
	}
	for _, s := range a.used {
		a.free[len(s)] = append(a.free[len(s)], s)
	}
	a.used = a.used[:0]
}
