package rng

import "testing"

// The first outputs are pinned: a change to the generator would silently change
// every generated model and adapter, so it must fail here first.
func TestPinnedSequence(t *testing.T) {
	r := New(42)
	got := []uint64{r.Uint64(), r.Uint64(), r.Uint64()}
	r2 := New(42)
	for i, g := range got {
		if v := r2.Uint64(); v != g {
			t.Fatalf("output %d not reproducible: %x vs %x", i, v, g)
		}
	}
	if got[0] == got[1] || got[1] == got[2] {
		t.Fatalf("degenerate outputs %x", got)
	}
	want := pinned
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("output %d = %#x, pinned %#x", i, got[i], want[i])
		}
	}
}

func TestFloat64Range(t *testing.T) {
	r := New(1)
	var sum float64
	const n = 200000
	for i := 0; i < n; i++ {
		f := r.Float64()
		if f < 0 || f >= 1 {
			t.Fatalf("out of range %v", f)
		}
		sum += f
	}
	if mean := sum / n; mean < 0.495 || mean > 0.505 {
		t.Fatalf("mean %v far from 0.5", mean)
	}
}

func TestDeriveIndependent(t *testing.T) {
	a := Derive(7, 1).Uint64()
	b := Derive(7, 2).Uint64()
	c := Derive(7, 1).Uint64()
	if a == b || a != c {
		t.Fatalf("derive: %x %x %x", a, b, c)
	}
}

var pinned = []uint64{0x15780b2e0c2ec716, 0x6104d9866d113a7e, 0xae17533239e499a1}
