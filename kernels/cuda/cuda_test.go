//go:build cuda

package cuda

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/wts-project/wts/kernels/golden"
	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/kernels/transformer"
)

func TestDevices(t *testing.T) {
	ds, err := Devices()
	if err != nil || len(ds) == 0 {
		t.Fatalf("devices %v, %v", ds, err)
	}
	for _, d := range ds {
		if d.Name == "" || d.FreeBytes == 0 || d.FreeBytes > d.TotalBytes || d.Major < 7 {
			t.Fatalf("device %+v", d)
		}
		t.Logf("device %d: %s, %.1f of %.1f GiB free, sm_%d%d", d.Index, d.Name, float64(d.FreeBytes)/(1<<30), float64(d.TotalBytes)/(1<<30), d.Major, d.Minor)
	}
}

// The device model, f32 weights with the golden adapter, gives PyTorch's
// logits and logprobs within the CPU engine's tolerances (kernels/golden).
func TestMatchesPyTorch(t *testing.T) {
	testdata := filepath.Join("..", "golden", "testdata")
	for _, preset := range golden.Presets {
		t.Run(preset, func(t *testing.T) {
			g, err := golden.Read(testdata, preset)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := model.Generate(preset, 1, dir, safetensors.F32); err != nil {
				t.Fatal(err)
			}
			w, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ad, err := lora.LoadPEFT(filepath.Join(testdata, preset+"-adapter"), w.Cfg)
			if err != nil {
				t.Fatal(err)
			}
			V := w.Cfg.Vocab
			m, err := Load(w, ad, Options{Slots: len(g.Data), MaxLen: 64, MaxRows: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			lps := g.Losses["cross_entropy"].Logprobs
			for i, d := range g.Data {
				T := len(d.ModelInput)
				slots, pos := make([]int, T), make([]int, T)
				for j := range pos {
					slots[j], pos[j] = i, j
				}
				logits := make([]float32, T*V)
				if _, err := m.Step(d.ModelInput, slots, pos, logits); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					for j, v := range logits {
						golden.Within(t, "logit", float64(v), g.Logits0[j], 2e-5, 1e-4)
					}
				}
				for j, target := range d.TargetTokens {
					golden.Within(t, "logprob", logprob(logits[j*V:(j+1)*V], target), lps[i][j], 1e-5, 1e-5)
				}
			}
		})
	}
}

// logprob is log softmax(row)[target], in float64.
func logprob(row []float32, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	s := 0.0
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	return float64(row[target]) - mx - math.Log(s)
}

// adapter is a LoRA adapter on every projection and the LM head, its B
// factors random (a fresh adapter's are zero, and would change nothing).
func adapter(t *testing.T, c model.Config) *lora.Adapter[float32] {
	cfg := lora.Config{Rank: 8, Alpha: 16, Seed: 1}
	cfg.Targets(true, true, true)
	ad, err := lora.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rng.New(2)
	for _, p := range ad.Params() {
		if !p.IsA {
			for i := range p.Data {
				p.Data[i] = float32(r.Float64()-0.5) * 0.1
			}
		}
	}
	return ad
}

// Two streams at different positions, prefilled in one step and decoded
// together, give the CPU engine's logits at every position, and its greedy
// tokens: with f32 weights, and with bf16 weights against the CPU engine
// on the same bf16-rounded weights; with and without an adapter and CUDA
// graphs.
func TestDecodeMatchesCPU(t *testing.T) {
	for _, c := range []struct {
		preset                string
		bf16, graphs, adapter bool
	}{
		{"tiny-qwen3", false, false, false}, {"tiny-qwen2", true, true, true},
		{"small", false, true, true}, {"small", true, false, false}, {"small", true, true, true},
	} {
		w, err := model.Random(model.Presets[c.preset], 3)
		if err != nil {
			t.Fatal(err)
		}
		var ad *lora.Adapter[float32]
		if c.adapter {
			ad = adapter(t, w.Cfg)
		}
		// The device copies the weights first: the CPU model packs them
		// and drops the row-major copies (transformer.New).
		m, err := Load(w, ad, Options{Slots: 2, MaxLen: 64, MaxRows: 32, BF16: c.bf16, Graphs: c.graphs})
		if err != nil {
			t.Fatal(err)
		}
		ref := w
		if c.bf16 {
			ref = model.Rounded(w, safetensors.BF16)
		}
		cpu := transformer.New(ref)
		V, r := w.Cfg.Vocab, rng.New(5)
		seqs := [][]int{make([]int, 48), make([]int, 48)}
		for _, s := range seqs {
			for i := range s {
				s[i] = int(r.Uint64() % uint64(V))
			}
		}
		act, err := cpu.Forward(ad, transformer.Pack(seqs), nil)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, 2*48*V)
		cpu.Head(act, nil, func(t int, row []float32) bool { copy(want[t*V:], row); return false })

		// One step prefills stream 0's first 20 tokens and stream 1's first 8.
		var toks, slots, pos []int
		for s, n := range []int{20, 8} {
			for p := 0; p < n; p++ {
				toks, slots, pos = append(toks, seqs[s][p]), append(slots, s), append(pos, p)
			}
		}
		check := func(what string, logits []float32, next []int, rows [][2]int) {
			t.Helper()
			for i, sp := range rows {
				ref := want[(sp[0]*48+sp[1])*V:][:V]
				got := logits[i*V : (i+1)*V]
				for j := range ref {
					if math.Abs(float64(got[j]-ref[j])) > 2e-4*(1+math.Abs(float64(ref[j]))) {
						t.Fatalf("%s %v: stream %d position %d logit %d = %v, CPU %v", c.preset, c.bf16, sp[0], sp[1], j, got[j], ref[j])
					}
				}
				if best, second := top2(ref); next[i] != best && float64(ref[best]-ref[second]) > 1e-3 {
					t.Fatalf("%s: greedy %d, CPU %d", what, next[i], best)
				}
			}
		}
		logits := make([]float32, 32*V)
		next, err := m.Step(toks, slots, pos, logits)
		if err != nil {
			t.Fatal(err)
		}
		var rows [][2]int
		for i := range toks {
			rows = append(rows, [2]int{slots[i], pos[i]})
		}
		check("prefill", logits, next, rows)
		// Then both decode a token a step, stream 1 twelve positions behind.
		for p := 20; p < 48; p++ {
			next, err := m.Step([]int{seqs[0][p], seqs[1][p-12]}, []int{0, 1}, []int{p, p - 12}, logits)
			if err != nil {
				t.Fatal(err)
			}
			check("decode", logits, next, [][2]int{{0, p}, {1, p - 12}})
		}
		m.Close()
	}
}

func top2(row []float32) (best, second int) {
	best, second = 0, 1
	if row[1] > row[0] {
		best, second = 1, 0
	}
	for j := 2; j < len(row); j++ {
		switch {
		case row[j] > row[best]:
			best, second = j, best
		case row[j] > row[second]:
			second = j
		}
	}
	return best, second
}

// Hostile steps get errors and change nothing the next step sees.
func TestStepRefusesBadRows(t *testing.T) {
	w, err := model.Random(model.Presets["tiny"], 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(w, nil, Options{Slots: 1, MaxLen: 16, MaxRows: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct{ toks, slots, pos []int }{
		{[]int{1}, []int{0}, []int{16}}, {[]int{1}, []int{1}, []int{0}}, {[]int{96}, []int{0}, []int{0}},
		{[]int{-1}, []int{0}, []int{0}}, {[]int{1, 2, 3, 4, 5}, []int{0, 0, 0, 0, 0}, []int{0, 1, 2, 3, 4}},
		{[]int{1}, []int{0, 0}, []int{0}}, {nil, nil, nil},
	} {
		if _, err := m.Step(c.toks, c.slots, c.pos, nil); err == nil {
			t.Fatalf("step %v accepted", c)
		}
	}
	if _, err := m.Step([]int{1}, []int{0}, []int{0}, make([]float32, 10)); err == nil {
		t.Fatal("a short logits buffer accepted")
	}
	if _, err := Load(w, nil, Options{Slots: 1, MaxLen: 1 << 20, MaxRows: 4}); err == nil {
		t.Fatal("a cache longer than the model's context accepted")
	}
	w.Layers[1].Wd = w.Layers[1].Wd[1:]
	if _, err := Load(w, nil, Options{Slots: 1, MaxLen: 16, MaxRows: 4}); !errors.Is(err, kerr.ErrBadModel) {
		t.Fatalf("a short down projection: %v", err)
	}
}
