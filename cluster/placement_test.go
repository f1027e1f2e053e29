package cluster

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/wts-project/wts/persistence"
)

func members(kinds [][]string) []*pcluster.Member {
	out := make([]*pcluster.Member, len(kinds))
	for i, k := range kinds {
		out[i] = &pcluster.Member{Id: fmt.Sprint("m", i), Host: "10.0.0.1", Port: int32(7000 + i), Kinds: k}
	}
	return out
}

// owners counts, by member id, the owners of n identities of kind.
func owners(ms []*pcluster.Member, kind string, n int, weight func(*pcluster.Member) float64, avoid map[string][]string) map[string]int {
	got := map[string]int{}
	for i := range n {
		if o := Owner(ms, kind, fmt.Sprint("wtr_", i), weight, avoid); o != nil {
			got[o.Id]++
		}
	}
	return got
}

// Each member owns a share of the grains proportional to its weight.
func TestOwnerWeighted(t *testing.T) {
	ms := members([][]string{{"run"}, {"run"}, {"run"}})
	w := map[string]float64{"m0": 1, "m1": 3, "m2": 4}
	const n = 40000
	got := owners(ms, "run", n, func(m *pcluster.Member) float64 { return w[m.Id] }, nil)
	for id, wt := range w {
		if share := float64(got[id]) / n; math.Abs(share-wt/8) > 0.015 {
			t.Errorf("member %s (weight %v) owns %.3f of the grains, want %.3f", id, wt, share, wt/8)
		}
	}
}

// A member that joins takes its share, and only grains that move to it
// move.
func TestOwnerJoinMovesOnlyToTheNewMember(t *testing.T) {
	one := func(*pcluster.Member) float64 { return 1 }
	before := members([][]string{{"run"}, {"run"}, {"run"}})
	after := members([][]string{{"run"}, {"run"}, {"run"}, {"run"}})
	const n = 20000
	moved := 0
	for i := range n {
		id := fmt.Sprint("wtr_", i)
		a, b := Owner(before, "run", id, one, nil), Owner(after, "run", id, one, nil)
		if a.Id == b.Id {
			continue
		}
		if b.Id != "m3" {
			t.Fatalf("%s moved from %s to %s, not to the member that joined", id, a.Id, b.Id)
		}
		moved++
	}
	if share := float64(moved) / n; math.Abs(share-0.25) > 0.015 {
		t.Errorf("the member that joined took %.3f of the grains, want 0.25", share)
	}
}

// Samplers keep off members that host runs while there are members for
// samplers alone, and use them otherwise; a kind nobody hosts has no
// owner.
func TestOwnerAvoid(t *testing.T) {
	one := func(*pcluster.Member) float64 { return 1 }
	avoid := map[string][]string{"sampler": {"run"}}
	split := members([][]string{{"session", "run", "sampler"}, {"session", "run"}, {"sampler"}, {"sampler"}})
	if got := owners(split, "sampler", 1000, one, avoid); got["m0"] != 0 || got["m2"] == 0 || got["m3"] == 0 {
		t.Errorf("samplers with members for samplers alone: %v", got)
	}
	if got := owners(split, "run", 1000, one, avoid); got["m2"] != 0 || got["m3"] != 0 || got["m0"] == 0 || got["m1"] == 0 {
		t.Errorf("runs: %v", got)
	}
	mixed := members([][]string{{"session", "run", "sampler"}, {"session", "run", "sampler"}})
	if got := owners(mixed, "sampler", 1000, one, avoid); got["m0"] == 0 || got["m1"] == 0 {
		t.Errorf("samplers with no member for samplers alone: %v", got)
	}
	if o := Owner(split, "export", "x", one, avoid); o != nil {
		t.Errorf("a kind nobody hosts placed on %s", o.Id)
	}
}

// With a directory, a grain is placed on the freer of its two first
// members and stays there while that member is up: a member that joins
// moves nothing and takes new grains; a grain whose member left is placed
// again among the others.
func TestPlacementDirectory(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	load := map[string]int{"m0": 8, "m1": 0}
	p := &Placement{Directory: st, Load: func(id, _ string) int { return load[id] }}
	two := members([][]string{{"run"}, {"run"}})
	owners := func(ms []*pcluster.Member, n int) map[string]string {
		out := map[string]string{}
		for i := range n {
			o, err := p.owner(ms, "run", fmt.Sprint("wtr_", i))
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprint("wtr_", i)] = o.Id
		}
		return out
	}
	first := owners(two, 40)
	for id, m := range first {
		if m != "m1" {
			t.Fatalf("%s placed on %s, the fuller member", id, m)
		}
	}
	load["m0"], load["m1"] = 0, 8 // the loads change: placed grains stay
	three := members([][]string{{"run"}, {"run"}, {"run"}})
	load["m2"] = 0
	for id, m := range owners(three, 40) {
		if m != first[id] {
			t.Fatalf("%s moved from %s to %s when a member joined", id, first[id], m)
		}
	}
	fresh := 0
	for i := 40; i < 80; i++ {
		o, err := p.owner(three, "run", fmt.Sprint("wtr_", i))
		if err != nil {
			t.Fatal(err)
		}
		if o.Id == "m1" {
			t.Fatalf("a new grain placed on the fullest member")
		}
		if o.Id == "m2" {
			fresh++
		}
	}
	if fresh == 0 {
		t.Error("no new grain placed on the member that joined")
	}
	gone := []*pcluster.Member{three[0], three[2]} // m1 left
	for id, m := range owners(gone, 40) {
		if m == "m1" {
			t.Fatalf("%s still placed on the member that left", id)
		}
	}
}

// A grain that needs a base model goes to a member that serves it, when
// one does, however loaded; to any member when none does.
func TestPlacementServesItsModel(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	load := map[string]int{"m0": 0, "m1": 0, "m2": 50}
	p := &Placement{Directory: st, Load: func(id, _ string) int { return load[id] },
		Needs: func(_, identity string) (string, error) {
			if identity[0] == 'b' {
				return "big", nil
			}
			return "nowhere", nil
		},
		Serves: func(id, model string) bool { return id == "m2" && model == "big" }}
	ms := members([][]string{{"run"}, {"run"}, {"run"}})
	others := 0
	for i := range 30 {
		if o, err := p.owner(ms, "run", fmt.Sprint("big_", i)); err != nil || o.Id != "m2" {
			t.Fatalf("a run of the big model placed on %v (%v), not on the one member serving it", o, err)
		}
		o, err := p.owner(ms, "run", fmt.Sprint("small_", i))
		if err != nil {
			t.Fatal(err)
		}
		if o.Id != "m2" {
			others++
		}
	}
	if others == 0 {
		t.Error("runs of a model no member serves all went to one member")
	}
}

// A new grain goes to the member with clearly more free device memory;
// within a hundredth of each other, to the one less loaded.
func TestPlacementFreeMemory(t *testing.T) {
	st, err := persistence.Open(filepath.Join(t.TempDir(), "wts.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	free := map[string]int64{"m0": 10 << 30, "m1": 2 << 30}
	load := map[string]int{"m0": 8, "m1": 0}
	p := &Placement{Directory: st, Load: func(id, _ string) int { return load[id] },
		Free: func(id string) (int64, bool) { return free[id], true }}
	two := members([][]string{{"run"}, {"run"}})
	place := func(from, to int) map[string]int {
		on := map[string]int{}
		for i := from; i < to; i++ {
			o, err := p.owner(two, "run", fmt.Sprint("wtr_", i))
			if err != nil {
				t.Fatal(err)
			}
			on[o.Id]++
		}
		return on
	}
	if on := place(0, 20); on["m0"] != 20 {
		t.Fatalf("with five times the free memory, m0 took %v", on)
	}
	free["m1"] = free["m0"] - free["m0"]/200
	if on := place(20, 40); on["m1"] != 20 {
		t.Fatalf("free memory within a hundredth, the less loaded m1 took %v", on)
	}
}
