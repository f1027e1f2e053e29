package transformer

import (
	"math"
	"testing"

	"github.com/wts-project/wts/kernels/gemm"
)

// Arena recycles the buffers of forward and backward passes. A training
// step allocates the same shapes every time, gigabytes of them for larger
// models; fresh allocations cost page faults and zeroing in the kernel and
// garbage collection after, which measured a third of a Qwen3-0.6B step. With
// an arena, steps after the first allocate nothing large (PyTorch's caching
// allocator does the same).
//
// A nil *Arena allocates normally. An Arena is not safe for concurrent use:
// each trainer or sampler call owns its own.
//
// A step asks for the same lengths in the same order as the step before, so
// the arena first replays that step's buffers in order and looks in its
// free lists only once the order differs: a tiny model's forward takes ~100
// buffers, and a map lookup for each, and another to give each back, were
// ~4% of it.
type Arena[F gemm.Float] struct {
	free map[int][][]F // buffers not in use and not in last, by length
	used [][]F         // handed out since Reset, in order
	last [][]F         // the previous step's from next on: free, replayed in order
	next int
	// acts is a pass's record of its activations, handed out once between
	// resets (actsOut): with ~1 KB of slice headers per layer, a tiny
	// model's forward allocated it afresh for every submission.
	acts    *Activations[F]
	actsOut bool
}

// NewArena returns an empty arena.
func NewArena[F gemm.Float]() *Arena[F] { return &Arena[F]{free: map[int][][]F{}} }

// Alloc returns a zeroed slice of n values.
func (a *Arena[F]) Alloc(n int) []F {
	s, reused := a.take(n)
	if reused {
		clear(s)
	}
	return s
}

// Take returns n values holding whatever an earlier step left there, for
// buffers the caller writes in full before reading them: outputs of
// products with beta 0, of norms, of copies. Clearing those first was a
// serial pass over every activation of a training step (a few percent of a
// forward_backward, the other cores idle meanwhile).
func (a *Arena[F]) Take(n int) []F {
	s, _ := a.take(n)
	if poisonTaken {
		for i := range s {
			s[i] = F(math.NaN())
		}
	}
	return s
}

// poisonTaken fills every Take with NaN under go test, so that a buffer
// read before it is written in full shows up in any test's results.
var poisonTaken = testing.Testing()

func (a *Arena[F]) take(n int) (s []F, reused bool) {
	if a == nil {
		return make([]F, n), false
	}
	if a.next < len(a.last) && len(a.last[a.next]) != n {
		a.release(a.last[a.next:]) // the order differs: stop replaying
		a.last = a.last[:0]
	}
	if a.next < len(a.last) {
		s, reused = a.last[a.next], true
		a.next++
	} else if list := a.free[n]; len(list) > 0 {
		s = list[len(list)-1]
		a.free[n] = list[:len(list)-1]
		reused = true
	} else {
		s = make([]F, n)
	}
	a.used = append(a.used, s)
	return s, reused
}

// Clone returns a copy of src from the arena.
func (a *Arena[F]) Clone(src []F) []F {
	s := a.Take(len(src))
	copy(s, src)
	return s
}

// Reset takes every buffer back: slices handed out before must no longer be
// used.
func (a *Arena[F]) Reset() {
	if a == nil {
		return
	}
	if a.next < len(a.last) {
		a.release(a.last[a.next:])
	}
	a.last, a.used, a.next = a.used, a.last[:0], 0
	a.actsOut = false
}

// activations returns an empty activations record with room for layers:
// the arena's own once between resets, a fresh one otherwise.
func (a *Arena[F]) activations(layers int) *Activations[F] {
	if a == nil || a.actsOut {
		return &Activations[F]{layers: make([]layerAct[F], layers)}
	}
	a.actsOut = true
	if a.acts == nil || cap(a.acts.layers) < layers {
		a.acts = &Activations[F]{layers: make([]layerAct[F], layers)}
	}
	ls := a.acts.layers[:layers]
	clear(ls)
	*a.acts = Activations[F]{layers: ls}
	return a.acts
}

// release puts buffers in the free lists.
func (a *Arena[F]) release(bufs [][]F) {
	for _, s := range bufs {
		a.free[len(s)] = append(a.free[len(s)], s)
	}
}
