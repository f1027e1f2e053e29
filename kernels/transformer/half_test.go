package transformer

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/wts-project/wts/kernels/gemm"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/safetensors"
)

// A model with 16-bit base weights computes what a float32 model computes
// with the same weights rounded to that type (its embeddings too): the
// training forward, its backward, the head, prefill and decode.
func TestHalfWeightsMatchRounded(t *testing.T) {
	for _, tc := range []struct {
		preset string
		half   gemm.Half
	}{{"tiny-qwen3", gemm.BF16}, {"small", gemm.BF16}, {"tiny-qwen3", gemm.F16}, {"small", gemm.F16}} {
		preset := tc.preset
		w, err := model.Random(model.Presets[preset], 3)
		if err != nil {
			t.Fatal(err)
		}
		ref := New(model.Rounded(w, tc.half.DType()))
		half := NewWith(w, Options{Half: tc.half})
		name := preset + " " + string(tc.half.DType())
		_, ad := fixture(t, preset)
		r := rng.New(4)
		V := w.Cfg.Vocab
		seqs := [][]int{randTokens(r, 40, V), randTokens(r, 64, V), randTokens(r, 66, V)} // 170 rows: past one chunk of mc rows
		g1, g2 := ad.ZerosLike(), ad.ZerosLike()
		a1, err := ref.ForwardGroups([]Group[float32]{{Adapter: ad, Grads: g1, Seqs: 3}}, Pack(seqs), nil, true)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := half.ForwardGroups([]Group[float32]{{Adapter: ad, Grads: g2, Seqs: 3}}, Pack(seqs), nil, true)
		if err != nil {
			t.Fatal(err)
		}
		near(t, name+" hidden", a2.Hidden, a1.Hidden, 1e-5)
		dh := make([]float32, len(a1.Hidden))
		for i := range dh {
			dh[i] = float32(r.Uniform(-1, 1))
		}
		ref.Backward(a1, dh)
		half.Backward(a2, dh)
		for i, p := range g1.Params() {
			near(t, name+" grad "+p.Name, g2.Params()[i].Data, p.Data, 1e-4)
		}
		z1, z2 := ref.Freeze(ad), half.Freeze(ad)
		c1, c2 := ref.NewCache(), half.NewCache()
		h1, err := ref.Extend(z1, c1, seqs[0][:20])
		if err != nil {
			t.Fatal(err)
		}
		h2, err := half.Extend(z2, c2, seqs[0][:20])
		if err != nil {
			t.Fatal(err)
		}
		near(t, name+" prefill", h2, h1, 1e-5)
		l1, l2 := make([]float32, V), make([]float32, V)
		for p := 20; p < 30; p++ {
			o1, err := ref.Decode(z1, []*Cache[float32]{c1}, []int{seqs[0][p]})
			if err != nil {
				t.Fatal(err)
			}
			o2, err := half.Decode(z2, []*Cache[float32]{c2}, []int{seqs[0][p]})
			if err != nil {
				t.Fatal(err)
			}
			near(t, name+" decode", o2, o1, 1e-5)
			ref.Logits(z1, o1, 1, nil, func(_ int, row []float32) { copy(l1, row) })
			half.Logits(z2, o2, 1, nil, func(_ int, row []float32) { copy(l2, row) })
			near(t, name+" logits", l2, l1, 1e-5)
		}
	}
}

// Load reads a folder's matrices one at a time as it packs them: a 16-bit
// checkpoint kept in its type (tied head or not) computes what a float32
// model of the same values does, and loading it allocates its packed
// weights and the 16-bit tensors read, never a float32 copy of the model
// (which the bound below would not hold). A float32 folder loads as
// model.Load does, kept in float32 or rounded to bf16.
func TestLoadFolder(t *testing.T) {
	for _, tc := range []struct {
		preset string
		tied   bool
		dtype  safetensors.DType
		half   gemm.Half
	}{{"small", true, safetensors.BF16, gemm.BF16}, {"tiny-qwen3", false, safetensors.BF16, gemm.BF16},
		{"small", true, safetensors.F16, gemm.F16}, {"tiny-qwen3", false, safetensors.F32, gemm.BF16},
		{"tiny-qwen3", false, safetensors.F32, 0}} {
		cfg := model.Presets[tc.preset]
		cfg.TieEmbed = tc.tied
		w, err := model.Random(cfg, 5)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := w.Save(dir, tc.dtype); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s tied=%v %s half=%d", tc.preset, tc.tied, tc.dtype, tc.half)
		f, err := model.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := Load(f, Options{Half: tc.half})
		runtime.ReadMemStats(&after)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if bound := uint64(m.WeightBytes() + 3*cfg.Values()); tc.half != 0 && tc.dtype == tc.half.DType() && after.TotalAlloc-before.TotalAlloc > bound {
			t.Fatalf("%s: loading allocated %d bytes, past %d", name, after.TotalAlloc-before.TotalAlloc, bound)
		}
		ref, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if tc.half != 0 {
			ref = model.Rounded(ref, tc.half.DType())
		}
		want, got := New(ref), m
		toks := randTokens(rng.New(6), 50, cfg.Vocab)
		a1, err := want.Infer(nil, Pack([][]int{toks}), nil)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := got.Infer(nil, Pack([][]int{toks}), nil)
		if err != nil {
			t.Fatal(err)
		}
		l1, l2 := make([]float32, cfg.Vocab*len(toks)), make([]float32, cfg.Vocab*len(toks))
		want.Logits(nil, a1.Hidden, len(toks), nil, func(i int, row []float32) { copy(l1[i*cfg.Vocab:], row) })
		got.Logits(nil, a2.Hidden, len(toks), nil, func(i int, row []float32) { copy(l2[i*cfg.Vocab:], row) })
		near(t, name+" logits", l2, l1, 1e-5)
	}
}
