package golden

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
)

// datum is d as the trainer takes it, with lossName's inputs.
func datum(d Datum, lossName string) train.Datum {
	in := loss.Inputs{TargetTokens: d.TargetTokens}
	if lossName == "cross_entropy" {
		in.Weights = d.Weights
	} else {
		in.Logprobs, in.Advantages = d.Logprobs, d.Advantages
	}
	return train.Datum{ModelInput: d.ModelInput, Loss: in}
}

func TestMatchesPyTorch(t *testing.T) { matchesPyTorch(t, 0) }

// A base saved in bf16, or f16, and kept so computes what PyTorch computes
// from the same weights upcast to float32, to the float32 tolerances: the
// products widen the weights exactly and accumulate in float32.
func TestMatchesPyTorchBF16(t *testing.T) { matchesPyTorch(t, gemm.BF16) }

func TestMatchesPyTorchF16(t *testing.T) { matchesPyTorch(t, gemm.F16) }

// matchesPyTorch holds each preset, saved in half (0: float32) and loaded
// as the executor loads a catalog model, to its golden file.
func matchesPyTorch(t *testing.T, half gemm.Half) {
	dtype, suffix := safetensors.F32, ""
	if half != 0 {
		dtype = half.DType()
		suffix = "-" + strings.ToLower(string(dtype))
	}
	for _, preset := range Presets {
		t.Run(preset, func(t *testing.T) {
			g, err := Read("testdata", preset+suffix)
			if err != nil {
				t.Fatal(err)
			}
			// The model is regenerated, not stored: its hash proves the
			// generator still writes the exact bytes PyTorch read.
			dir := t.TempDir()
			if err := model.Generate(preset, 1, dir, dtype); err != nil {
				t.Fatal(err)
			}
			st, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
			if sum := sha256.Sum256(st); hex.EncodeToString(sum[:]) != g.ModelSHA256 {
				t.Fatal("generated model differs from the one the golden file was made from")
			}
			f, err := model.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := transformer.Load(f, transformer.Options{Half: half})
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			ad, err := lora.LoadPEFT(filepath.Join("testdata", preset+"-adapter"), m.Cfg())
			if err != nil {
				t.Fatal(err)
			}
			V := m.Cfg().Vocab

			// Logits of the first datum.
			act, err := m.Forward(ad, transformer.Pack([][]int{g.Data[0].ModelInput}), nil)
			if err != nil {
				t.Fatal(err)
			}
			m.Head(act, nil, func(tk int, row []float32) bool {
				for j, v := range row {
					Within(t, "logit", float64(v), g.Logits0[tk*V+j], 2e-5, 1e-4)
				}
				return false
			})

			for name, want := range g.Losses {
				data := make([]train.Datum, len(g.Data))
				for i, d := range g.Data {
					data[i] = datum(d, name)
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
				Within(t, name+" loss:sum", out.Metrics["loss:sum"], want.LossSum, 1e-5, 1e-5)
				for i := range want.Logprobs {
					for j, lp := range want.Logprobs[i] {
						Within(t, name+" logprob", out.Logprobs[i][j], lp, 1e-5, 1e-5)
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
						Within(t, name+" grad "+p.Name, float64(v), ref[j], 1e-6, 1e-3)
					}
				}
			}

			if g.AdamW.Steps == 0 {
				return
			}
			// Three AdamW steps with clipping and weight decay.
			tr := train.NewTrainer(m, ad)
			hp := g.AdamW.Params
			op := optim.Params{LR: hp["lr"], Beta1: hp["beta1"], Beta2: hp["beta2"], Eps: hp["eps"], WeightDecay: hp["weight_decay"], GradClipNorm: hp["grad_clip_norm"]}
			data := make([]train.Datum, len(g.Data))
			for i, d := range g.Data {
				data[i] = datum(d, "cross_entropy")
			}
			for s := 0; s < g.AdamW.Steps; s++ {
				if _, err := tr.ForwardBackward(context.Background(), data, "cross_entropy", nil); err != nil {
					t.Fatal(err)
				}
				met, err := tr.OptimStep(op)
				if err != nil {
					t.Fatal(err)
				}
				Within(t, "grad norm", met.GradNorm, g.AdamW.GradNorms[s], 1e-5, 1e-4)
			}
			for _, p := range tr.Adapter().Params() {
				ref := g.AdamW.Adapter[p.Name]
				for j, v := range p.Data {
					// A parameter moves at most ~lr per step; agreeing to 1% of
					// that step is far tighter than any update-rule error.
					Within(t, "adamw "+p.Name, float64(v), ref[j], 1e-4*hp["lr"]*10, 1e-4)
				}
			}
		})
	}
}
