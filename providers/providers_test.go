package providers

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
)

// Offers restrict each provider's row to the models named; a provider
// named with none is not offered; an offer of an unknown provider or
// model is refused.
func TestRegistryOffers(t *testing.T) {
	dirs := map[string]string{}
	for _, name := range []string{"a", "b"} {
		dirs[name] = filepath.Join(t.TempDir(), name)
		if err := model.Generate("tiny", 1, dirs[name], safetensors.F32); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewCatalog(dirs)
	if err != nil {
		t.Fatal(err)
	}
	all, err := NewRegistry(c, nil)
	if err != nil || !slices.Equal(all.Row(A).Models, []string{"a", "b"}) || !slices.Equal(all.Row(B).Models, []string{"a", "b"}) {
		t.Fatalf("no offers: every provider offers every model: %v", err)
	}
	r, err := NewRegistry(c, map[string][]string{A: {"b", "b"}})
	if err != nil || !slices.Equal(r.Row(A).Models, []string{"b"}) || !slices.Equal(r.Row(B).Models, []string{"a", "b"}) {
		t.Fatalf("provider_a restricted to b: %+v %+v %v", r.Row(A), r.Row(B), err)
	}
	r, err = NewRegistry(c, map[string][]string{B: {}})
	if err != nil || r.Row(B) != nil {
		t.Fatalf("provider_b turned off: %v", err)
	}
	if got, err := r.Route("auto", []string{B}); err != nil || !slices.Equal(got, []string{A}) {
		t.Fatalf("auto preferring a provider turned off: %v %v", got, err)
	}
	if _, err := r.Route(B, nil); err == nil {
		t.Fatal("naming a provider turned off routed")
	}
	for _, bad := range []map[string][]string{{"provider_c": {"a"}}, {A: {"c"}}, {A: {}, B: {}}} {
		if _, err := NewRegistry(c, bad); err == nil {
			t.Fatalf("offers %v accepted", bad)
		}
	}
}

// A checkpoint saved in bfloat16 runs with bf16 weights, one in float16
// with f16; any other, f32;
// each capability row says so of the models it offers.
func TestCatalogWeights(t *testing.T) {
	dirs := map[string]string{}
	for name, dt := range map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16, "f16": safetensors.F16} {
		dirs[name] = filepath.Join(t.TempDir(), name)
		if err := model.Generate("tiny", 1, dirs[name], dt); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewCatalog(dirs)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(c, map[string][]string{A: {"bf16"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"f32": WeightsF32, "bf16": WeightsBF16, "f16": WeightsF16} {
		if m, _ := c.Lookup(name); m.Weights != want {
			t.Fatalf("%s checkpoint: weights %q, want %q", name, m.Weights, want)
		}
		if got := r.Row(B).ResourceProfiles[DefaultProfile].Weights[name]; got != want {
			t.Fatalf("%s: provider_b's row says %q, want %q", name, got, want)
		}
	}
	if got := r.Row(A).ResourceProfiles[DefaultProfile].Weights; len(got) != 1 || got["bf16"] != WeightsBF16 {
		t.Fatalf("provider_a offers only bf16, yet its row says %v", got)
	}
}
