package harness

import (
	"slices"
	"time"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

// Engine is the engine alone, in process, decoding one stream on the
// service's model with an adapter of the same shape: the service's figures
// less the API, the grains and the batching around it.
type Engine struct {
	TTFT       float64 `json:"ttft_p50_ms"` // prefill and the first token
	ITL        float64 `json:"itl_p50_ms"`  // one decode step
	TokensPerS float64 `json:"tokens_per_s"`
}

// EngineAlone times runs greedy requests of prompt and tokens tokens on
// the model folder dir under a fresh rank-r adapter: Start (prefill and
// first token), then each Step.
func EngineAlone(dir string, rank, prompt, tokens, runs int) (*Engine, error) {
	w, err := model.Load(dir)
	if err != nil {
		return nil, err
	}
	m := transformer.New(w)
	cfg := lora.Config{Rank: rank, Alpha: lora.DefaultAlpha}
	cfg.Targets(true, true, true)
	ad, err := lora.New(w.Cfg, cfg)
	if err != nil {
		return nil, err
	}
	eng := sampler.OnCPU(m)
	z := eng.Freeze(ad)
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = 3 + i*7%(w.Cfg.Vocab-3)
	}
	var firsts, steps []float64
	var total time.Duration
	for range runs {
		t0 := time.Now()
		s, err := sampler.Start(eng, z, sampler.Request{Prompt: ids, NumSamples: 1, Params: sampler.Params{MaxTokens: tokens, Temperature: 0, TopP: 1, TopK: -1}})
		if err != nil {
			return nil, err
		}
		firsts = append(firsts, ms(time.Since(t0)))
		for !s.Done() {
			t1 := time.Now()
			if err := sampler.Step([]*sampler.Stream{s}); err != nil {
				return nil, err
			}
			steps = append(steps, ms(time.Since(t1)))
		}
		total += time.Since(t0)
	}
	slices.Sort(firsts)
	slices.Sort(steps)
	return &Engine{TTFT: quantile(firsts, 0.5), ITL: quantile(steps, 0.5), TokensPerS: float64(runs*tokens) / total.Seconds()}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
