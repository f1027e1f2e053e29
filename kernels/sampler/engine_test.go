package sampler_test

import (
	"testing"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/sampler/enginetest"
	"github.com/wts-project/wts/kernels/transformer"
)

// The CPU engine keeps the Engine contract, with float32 and with bf16
// base weights.
func TestCPUEngine(t *testing.T) {
	for _, o := range []transformer.Options{{}, {Half: gemm.BF16}} {
		w, err := model.Random(model.Presets["tiny-qwen3"], 8)
		if err != nil {
			t.Fatal(err)
		}
		cfg := lora.Config{Rank: 4, Alpha: 8, Seed: 2}
		cfg.Targets(true, true, true)
		ad, err := lora.New(w.Cfg, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := rng.New(3)
		for _, p := range ad.Params() {
			if !p.IsA { // B starts at zero: give the adapter an effect
				for i := range p.Data {
					p.Data[i] = float32(r.Uniform(-0.5, 0.5))
				}
			}
		}
		enginetest.Check(t, sampler.OnCPU(transformer.NewWith(w, o)), ad, 1e-4)
	}
}
