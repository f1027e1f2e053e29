// Package golden holds the PyTorch golden files and the test that holds the
// engine to them. gen_golden.py (make golden) regenerates them; CI only reads.
package golden

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
)

type goldenDatum struct {
	ModelInput   []int     `json:"model_input"`
	TargetTokens []int     `json:"target_tokens"`
	Weights      []float64 `json:"weights"`
	Advantages   []float64 `json:"advantages"`
	Logprobs     []float64 `json:"logprobs"`
}

type goldenFile struct {
	Preset      string        `json:"preset"`
	ModelSHA256 string        `json:"model_sha256"`
	Data        []goldenDatum `json:"data"`
	Logits0     []float64     `json:"logits0"`
	Losses      map[string]struct {
		LossSum  float64              `json:"loss_sum"`
		Logprobs [][]float64          `json:"logprobs"`
		Grads    map[string][]float64 `json:"grads"`
	} `json:"losses"`
	AdamW struct {
		Params    map[string]float64   `json:"params"`
		Steps     int                  `json:"steps"`
		GradNorms []float64            `json:"grad_norms"`
		Adapter   map[string][]float64 `json:"adapter"`
	} `json:"adamw"`
}

func (d goldenDatum) datum(lossName string) train.Datum {
	in := loss.Inputs{TargetTokens: d.TargetTokens}
	if lossName == "cross_entropy" {
		in.Weights = d.Weights
	} else {
		in.Logprobs, in.Advantages = d.Logprobs, d.Advantages
	}
	return train.Datum{ModelInput: d.ModelInput, Loss: in}
}

func within(t *testing.T, what string, got, want, atol, rtol float64) {
	t.Helper()
	if math.Abs(got-want) > atol+rtol*math.Abs(want) || math.IsNaN(got) {
		t.Fatalf("%s: got %.8g, PyTorch %.8g", what, got, want)
	}
}

func TestMatchesPyTorch(t *testing.T) {
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"} {
		t.Run(preset, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", preset+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var g goldenFile
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			// The model is regenerated, not stored: its hash proves the
			// generator still writes the exact bytes PyTorch read.
			dir := t.TempDir()
			if err := model.Generate(preset, 1, dir, safetensors.F32); err != nil {
				t.Fatal(err)
			}
			st, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
			if sum := sha256.Sum256(st); hex.EncodeToString(sum[:]) != g.ModelSHA256 {
				t.Fatal("generated model differs from the one the golden file was made from")
			}
			w, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ad, err := lora.LoadPEFT(filepath.Join("testdata", preset+"-adapter"), w.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := transformer.New(w)
			V := w.Cfg.Vocab

			// Logits of the first datum.
			act, err := m.Forward(ad, transformer.Pack([][]int{g.Data[0].ModelInput}), nil)
			if err != nil {
				t.Fatal(err)
			}
			m.Head(act, nil, func(tk int, row []float32) bool {
				for j, v := range row {
					within(t, "logit", float64(v), g.Logits0[tk*V+j], 2e-5, 1e-4)
				}
				return false
			})

			for name, want := range g.Losses {
				data := make([]train.Datum, len(g.Data))
				for i, d := range g.Data {
					data[i] = d.datum(name)
				}
				fn, err := loss.New(name, nil)
				if err != nil {
					t.Fatal(err)
				}
				grads := ad.ZerosLike()
				out, err := train.Evaluate(context.Background(), m, ad, data, fn, grads, nil)
				if err != nil {
					t.Fatal(err)
				}
				within(t, name+" loss:sum", out.Metrics["loss:sum"], want.LossSum, 1e-5, 1e-5)
				for i := range want.Logprobs {
					for j, lp := range want.Logprobs[i] {
						within(t, name+" logprob", out.Logprobs[i][j], lp, 1e-5, 1e-5)
					}
				}
				if want.Grads == nil {
					continue
				}
				for _, p := range grads.Params() {
					ref, ok := want.Grads[p.Name]
					if !ok || len(ref) != len(p.Data) {
						t.Fatalf("golden has no gradient for %s", p.Name)
					}
					for j, v := range p.Data {
						within(t, name+" grad "+p.Name, float64(v), ref[j], 1e-6, 1e-3)
					}
				}
			}

			// Three AdamW steps with clipping and weight decay.
			tr := train.NewTrainer(m, ad)
			hp := g.AdamW.Params
			op := optim.Params{LR: hp["lr"], Beta1: hp["beta1"], Beta2: hp["beta2"], Eps: hp["eps"], WeightDecay: hp["weight_decay"], GradClipNorm: hp["grad_clip_norm"]}
			data := make([]train.Datum, len(g.Data))
			for i, d := range g.Data {
				data[i] = d.datum("cross_entropy")
			}
			for s := 0; s < g.AdamW.Steps; s++ {
				if _, err := tr.ForwardBackward(context.Background(), data, "cross_entropy", nil); err != nil {
					t.Fatal(err)
				}
				met, err := tr.OptimStep(op)
				if err != nil {
					t.Fatal(err)
				}
				within(t, "grad norm", met.GradNorm, g.AdamW.GradNorms[s], 1e-5, 1e-4)
			}
			for _, p := range tr.Adapter().Params() {
				ref := g.AdamW.Adapter[p.Name]
				for j, v := range p.Data {
					// A parameter moves at most ~lr per step; agreeing to 1% of
					// that step is far tighter than any update-rule error.
					within(t, "adamw "+p.Name, float64(v), ref[j], 1e-4*hp["lr"]*10, 1e-4)
				}
			}
		})
	}
}
