package lora_test

import (
	"math"
	"testing"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

// TestMerge holds the merged weights to the adapter they fold in: the base
// model with the adapter and the merged model alone give the same logprobs,
// for a tied model whose lm_head is adapted too, and the base is untouched.
func TestMerge(t *testing.T) {
	mc := model.Presets["tiny-qwen3"] // tied embeddings, q/k norms
	w, err := model.Random(mc, 3)
	if err != nil {
		t.Fatal(err)
	}
	c := lora.Config{Rank: 4, Alpha: 8, Seed: 5}
	c.Targets(true, true, true)
	ad, err := lora.New(mc, c)
	if err != nil {
		t.Fatal(err)
	}
	r := rng.New(9)
	for _, p := range ad.Params() { // B starts at zero: give it weight
		for i := range p.Data {
			p.Data[i] = float32(r.Float64()-0.5) * 0.2
		}
	}
	wq := append([]float32(nil), w.Layers[0].Wq...)
	merged := lora.Merge(w, ad)
	if merged.Cfg.TieEmbed || &merged.LMHead[0] == &merged.Embed[0] {
		t.Error("an adapted lm_head must untie the merged model")
	}
	for i := range wq {
		if w.Layers[0].Wq[i] != wq[i] {
			t.Fatal("Merge changed the base weights")
		}
	}
	base := transformer.New(w)
	tokens := []int{1, 5, 9, 2, 7, 3}
	want, err := sampler.Logprobs(sampler.OnCPU(base), base.Freeze(ad), tokens)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sampler.Logprobs(sampler.OnCPU(transformer.New(merged)), nil, tokens)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if math.Abs(*got[i]-*want[i]) > 1e-4 {
			t.Errorf("token %d: merged %v, base+adapter %v", i, *got[i], *want[i])
		}
	}
}
