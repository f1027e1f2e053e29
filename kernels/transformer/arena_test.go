package transformer

import (
	"testing"

	"github.com/wts-project/wts/kernels/rng"
)

// Within a step no buffer is handed out twice, whatever order the lengths
// come in; a step that repeats the previous one's order gets its buffers
// back in that order; and a step asking for lengths the arena has seen, in
// any order, allocates nothing new.
func TestArenaReuse(t *testing.T) {
	a := NewArena[float32]()
	r := rng.New(7)
	step := func(lens []int) [][]float32 {
		a.Reset()
		var got [][]float32
		seen := map[*float32]bool{}
		for i, n := range lens {
			var s []float32
			if i%2 == 0 {
				s = a.Alloc(n)
				for j := range s {
					if s[j] != 0 {
						t.Fatalf("Alloc(%d) not zeroed", n)
					}
				}
			} else {
				s = a.Take(n)
			}
			if len(s) != n || seen[&s[0]] {
				t.Fatalf("take %d of %v: len %d, handed out before: %v", i, lens, len(s), seen[&s[0]])
			}
			seen[&s[0]] = true
			for j := range s {
				s[j] = float32(i + 1)
			}
			got = append(got, s)
		}
		return got
	}
	base := []int{8, 16, 8, 32, 16, 8, 64}
	first := step(base)
	again := step(base)
	for i := range first {
		if &first[i][0] != &again[i][0] {
			t.Fatalf("repeated step: buffer %d not replayed", i)
		}
	}
	known := map[*float32]bool{}
	for _, s := range first {
		known[&s[0]] = true
	}
	step(base[:3]) // the same order, cut short: the rest stays free
	for i, s := range step(base) {
		if !known[&s[0]] {
			t.Fatalf("after a shorter step, buffer %d was allocated afresh", i)
		}
	}
	for range 200 {
		lens := append([]int(nil), base...)
		for i := range lens { // shuffle, and sometimes drop the tail
			j := i + int(r.Uint64()%uint64(len(lens)-i))
			lens[i], lens[j] = lens[j], lens[i]
		}
		lens = lens[:1+int(r.Uint64()%uint64(len(lens)))]
		got := step(lens)
		for i, s := range got {
			if s[0] != float32(i+1) {
				t.Fatalf("buffer %d overwritten by a later take", i)
			}
		}
	}
	a.Reset()
	if n := len(a.last) + countFree(a); n != len(base) {
		t.Fatalf("the arena holds %d buffers, want the %d of one step (steps asked for no more)", n, len(base))
	}
}

func countFree(a *Arena[float32]) int {
	n := 0
	for _, l := range a.free {
		n += len(l)
	}
	return n
}

// Two passes on one arena between resets keep records of their own, and
// the arena's record comes back empty after a reset: a Backward reads its
// pass's record, which a second pass must not overwrite.
func TestArenaActivations(t *testing.T) {
	m, ad := fixture(t, "tiny")
	a := NewArena[float32]()
	seq := randTokens(rng.New(4), 9, m.Cfg().Vocab)
	first, _ := m.Forward(ad, Pack([][]int{seq}), a)
	second, _ := m.Forward(ad, Pack([][]int{seq[:5]}), a)
	if first == second || first.T() != 9 || second.T() != 5 {
		t.Fatalf("passes between resets share a record: %p %p, T %d %d", first, second, first.T(), second.T())
	}
	a.Reset()
	third, _ := m.Forward(nil, Pack([][]int{seq[:3]}), a)
	if third != first || third.T() != 3 || third.layers[0].lu[0] != nil {
		t.Fatalf("after a reset: record %p (arena's %p), T %d, a LoRA buffer left %v", third, first, third.T(), third.layers[0].lu[0] != nil)
	}
}
