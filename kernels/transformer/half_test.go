package transformer

import (
	"testing"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
)

// A model with bf16 base weights computes what a float32 model computes
// with the same weights rounded to bf16 (its embeddings too): the training
// forward, its backward, the head, prefill and decode.
func TestBF16WeightsMatchRounded(t *testing.T) {
	for _, preset := range []string{"tiny-qwen3", "small"} {
		w, err := model.Random(model.Presets[preset], 3)
		if err != nil {
			t.Fatal(err)
		}
		ref := New(model.RoundedBF16(w, true))
		half := NewWith(w, Options{BF16: true})
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
		near(t, preset+" hidden", a2.Hidden, a1.Hidden, 1e-5)
		dh := make([]float32, len(a1.Hidden))
		for i := range dh {
			dh[i] = float32(r.Uniform(-1, 1))
		}
		ref.Backward(a1, dh)
		half.Backward(a2, dh)
		for i, p := range g1.Params() {
			near(t, preset+" grad "+p.Name, g2.Params()[i].Data, p.Data, 1e-4)
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
		near(t, preset+" prefill", h2, h1, 1e-5)
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
			near(t, preset+" decode", o2, o1, 1e-5)
			ref.Logits(z1, o1, 1, nil, func(_ int, row []float32) { copy(l1, row) })
			half.Logits(z2, o2, 1, nil, func(_ int, row []float32) { copy(l2, row) })
			near(t, preset+" logits", l2, l1, 1e-5)
		}
	}
}
