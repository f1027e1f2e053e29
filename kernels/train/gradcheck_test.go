package train

import (
	"context"
	"math"
	"testing"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/transformer"
)

// gradFixture is a float64 model, an adapter with non-zero B (with B = 0 the
// gradient of A is exactly zero and would prove nothing), and a batch of two
// sequences of different lengths with every loss input filled in.
func gradFixture(t *testing.T, preset string) (*transformer.Model[float64], *lora.Adapter[float64], []Datum) {
	t.Helper()
	w, err := model.Random(model.Presets[preset], 21)
	if err != nil {
		t.Fatal(err)
	}
	cfg := lora.Config{Rank: 2, Alpha: 4, Seed: 5}
	cfg.Targets(true, true, true)
	a32, err := lora.New(w.Cfg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ad := a32.Float64()
	r := rng.New(9)
	for _, p := range ad.Params() {
		if !p.IsA {
			for i := range p.Data {
				p.Data[i] = r.Uniform(-0.05, 0.05)
			}
		}
	}
	m := transformer.New(w.Float64())
	var data []Datum
	for _, n := range []int{5, 3} {
		d := Datum{ModelInput: make([]int, n)}
		in := &d.Loss
		for i := 0; i < n; i++ {
			d.ModelInput[i] = int(r.Uint64() % uint64(w.Cfg.Vocab))
			in.TargetTokens = append(in.TargetTokens, int(r.Uint64()%uint64(w.Cfg.Vocab)))
			in.Weights = append(in.Weights, r.Uniform(0, 1))
			in.Advantages = append(in.Advantages, r.Uniform(-1, 1))
		}
		data = append(data, d)
	}
	// Sampler logprobs at fixed offsets from the model's own, so PPO's and
	// CISPO's clipped and unclipped branches are both exercised, each far
	// from its kink.
	ce, _ := loss.New("cross_entropy", nil)
	base, err := Evaluate(context.Background(), m, ad, inputsFor("cross_entropy", data), ce, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	offsets := []float64{-0.5, -0.05, 0.05, 0.5}
	for i := range data {
		for j, lp := range base.Logprobs[i] {
			data[i].Loss.Logprobs = append(data[i].Loss.Logprobs, lp+offsets[(i+j)%4])
		}
	}
	return m, ad, data
}

// inputsFor keeps the loss inputs a loss accepts.
func inputsFor(name string, data []Datum) []Datum {
	out := make([]Datum, len(data))
	for i, d := range data {
		out[i] = Datum{ModelInput: d.ModelInput, Loss: loss.Inputs{TargetTokens: d.Loss.TargetTokens}}
		if name == "cross_entropy" {
			out[i].Loss.Weights = d.Loss.Weights
		} else {
			out[i].Loss.Logprobs, out[i].Loss.Advantages = d.Loss.Logprobs, d.Loss.Advantages
		}
	}
	return out
}

func TestGradientsFiniteDifference(t *testing.T) {
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"} {
		m, ad, all := gradFixture(t, preset)
		for _, name := range loss.Names() {
			data := inputsFor(name, all)
			fn, err := loss.New(name, nil)
			if err != nil {
				t.Fatal(err)
			}
			grads := ad.ZerosLike()
			if _, err := Evaluate(context.Background(), m, ad, data, fn, grads, nil); err != nil {
				t.Fatal(err)
			}
			// CISPO's clipped ratio is detached: its gradient is that of
			// cross-entropy weighted by clip(ratio)·A frozen at this point,
			// which is the differentiable objective to difference.
			fdData, fdFn := data, fn
			if name == "cispo" {
				fdFn, _ = loss.New("cross_entropy", nil)
				fdData = inputsFor("cross_entropy", data)
				cur, _ := Evaluate(context.Background(), m, ad, data, fn, nil, nil)
				for i := range fdData {
					w := make([]float64, len(cur.Logprobs[i]))
					for j, lp := range cur.Logprobs[i] {
						ratio := math.Exp(lp - data[i].Loss.Logprobs[j])
						w[j] = min(max(ratio, loss.DefaultClipLow), loss.DefaultClipHigh) * data[i].Loss.Advantages[j]
					}
					fdData[i].Loss.Weights = w
				}
			}
			lossAt := func() float64 {
				out, err := Evaluate(context.Background(), m, ad, fdData, fdFn, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				return out.Metrics["loss:sum"]
			}
			// Every parameter for cross-entropy on the llama preset; a
			// spread-out sample elsewhere keeps the suite quick.
			stride := 1
			if preset != "tiny" || name != "cross_entropy" {
				stride = 13
			}
			gp := grads.Params()
			checked := 0
			for pi, p := range ad.Params() {
				for j := pi % stride; j < len(p.Data); j += stride {
					const h = 1e-5
					old := p.Data[j]
					p.Data[j] = old + h
					lp := lossAt()
					p.Data[j] = old - h
					lm := lossAt()
					p.Data[j] = old
					num := (lp - lm) / (2 * h)
					got := gp[pi].Data[j]
					if math.Abs(num-got) > 1e-6+1e-5*math.Abs(num) {
						t.Fatalf("%s %s %s[%d]: analytic %.10g numeric %.10g", preset, name, p.Name, j, got, num)
					}
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("nothing checked")
			}
		}
	}
}
