package transformer

import (
	"errors"
	"math"
	"testing"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
)

func fixture(t *testing.T, preset string) (*Model[float32], *lora.Adapter[float32]) {
	t.Helper()
	w, err := model.Random(model.Presets[preset], 3)
	if err != nil {
		t.Fatal(err)
	}
	cfg := lora.Config{Rank: 4, Alpha: 8, Seed: 1}
	cfg.Targets(true, true, true)
	ad, _ := lora.New(w.Cfg, cfg)
	r := rng.New(2)
	for _, p := range ad.Params() {
		if !p.IsA {
			for i := range p.Data {
				p.Data[i] = float32(r.Uniform(-0.1, 0.1))
			}
		}
	}
	return New(w), ad
}

func randTokens(r *rng.Source, n, vocab int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = int(r.Uint64() % uint64(vocab))
	}
	return s
}

func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > tol*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// Prefill in chunks, and decoding one token at a time on forked caches, must
// give the hidden states the training forward pass gives, and the frozen
// adapter's logits those of the training head.
func TestCachedDecodingMatchesForward(t *testing.T) {
	for _, preset := range []string{"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3"} {
		m, ad := fixture(t, preset)
		D := m.Cfg().Hidden
		r := rng.New(4)
		seqA := randTokens(r, 300, m.Cfg().Vocab)[:100] // longer than nothing, shorter than context
		seqB := append(append([]int(nil), seqA[:60]...), randTokens(r, 40, m.Cfg().Vocab)...)
		full, err := m.Forward(ad, Pack([][]int{seqA, seqB}), nil)
		if err != nil {
			t.Fatal(err)
		}
		// Shared 60-token prompt, then two continuations decoded in one batch.
		z := m.Freeze(ad)
		root := m.NewCache()
		h, err := m.Extend(z, root, seqA[:60])
		if err != nil {
			t.Fatal(err)
		}
		near(t, preset+" prefill", h, full.Hidden[:60*D], 1e-4)
		V := m.Cfg().Vocab
		want, got := make([]float32, 60*V), make([]float32, 60*V)
		m.Head(full, nil, func(t int, row []float32) bool {
			if t < 60 {
				copy(want[t*V:], row)
			}
			return false
		})
		m.Logits(z, h, 60, nil, func(t int, row []float32) { copy(got[t*V:], row) })
		near(t, preset+" logits", got, want, 1e-4)
		// A runs a position ahead of B, so each row of a step has its own
		// position (RoPE angles, cache length).
		caches := []*Cache[float32]{root.Fork(), root.Fork()}
		out, err := m.Decode(z, caches[:1], []int{seqA[60]})
		if err != nil {
			t.Fatal(err)
		}
		near(t, preset+" decode A alone", out, full.Hidden[60*D:61*D], 1e-4)
		for p := 60; p < 99; p++ {
			out, err := m.Decode(z, caches, []int{seqA[p+1], seqB[p]})
			if err != nil {
				t.Fatal(err)
			}
			near(t, preset+" decode A", out[:D], full.Hidden[(p+1)*D:(p+2)*D], 1e-4)
			near(t, preset+" decode B", out[D:], full.Hidden[(100+p)*D:(101+p)*D], 1e-4)
		}
	}
}

// Samples of one prompt decoded in step attend over the prompt together
// (in groups of at most maxShare), beside a row with a cache of its own;
// each row must still get the training forward's hidden states.
func TestDecodeSharedPrefix(t *testing.T) {
	m, ad := fixture(t, "tiny-qwen3")
	D, V := m.Cfg().Hidden, m.Cfg().Vocab
	r := rng.New(5)
	const P, steps, forks = 20, 12, maxShare + 2
	prompt := randTokens(r, P, V)
	seqs := make([][]int, forks+1) // the forks' sequences, then the lone row's
	for i := range seqs {
		seqs[i] = append(append([]int(nil), prompt...), randTokens(r, steps+1, V)...)
	}
	seqs[forks] = randTokens(r, P+steps+1, V)
	full, err := m.Forward(ad, Pack(seqs), nil)
	if err != nil {
		t.Fatal(err)
	}
	z := m.Freeze(ad)
	root, lone := m.NewCache(), m.NewCache()
	if _, err := m.Extend(z, root, prompt); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Extend(z, lone, seqs[forks][:P]); err != nil {
		t.Fatal(err)
	}
	caches := []*Cache[float32]{lone}
	for range forks {
		caches = append(caches, root.Fork())
	}
	rows := append([][]int{seqs[forks]}, seqs[:forks]...) // row b decodes rows[b]
	if got := shareGroups(caches); len(got) != len(caches) {
		t.Fatalf("groups %v over a %d-token prompt: want one a row", got, P)
	}
	defer func(n int) { minShared = n }(minShared)
	minShared = P
	if got := shareGroups(caches); len(got) != 3 || len(got[1]) != maxShare || len(got[2]) != 2 {
		t.Fatalf("groups %v: want the lone row, then %d forks and 2", got, maxShare)
	}
	L := P + steps + 1
	for p := P; p < P+steps; p++ {
		feed := make([]int, len(rows))
		for b, s := range rows {
			feed[b] = s[p]
		}
		out, err := m.Decode(z, caches, feed)
		if err != nil {
			t.Fatal(err)
		}
		for b := range rows {
			i := b - 1 // the sequence's index in seqs
			if b == 0 {
				i = forks
			}
			near(t, "shared prefix decode", out[b*D:(b+1)*D], full.Hidden[(i*L+p)*D:(i*L+p+1)*D], 1e-4)
		}
	}
}

func TestBadTokensAndLength(t *testing.T) {
	m, ad := fixture(t, "tiny")
	if _, err := m.Forward(ad, Pack([][]int{{1, 96}}), nil); !errors.Is(err, kerr.ErrTokenRange) {
		t.Fatalf("vocab: %v", err)
	}
	if _, err := m.Forward(ad, Pack([][]int{make([]int, 129)}), nil); !errors.Is(err, kerr.ErrTooLong) {
		t.Fatalf("length: %v", err)
	}
	c := m.NewCache()
	if _, err := m.Extend(m.Freeze(ad), c, []int{-1}); !errors.Is(err, kerr.ErrTokenRange) {
		t.Fatalf("extend: %v", err)
	}
}

// The adapter at initialisation (B = 0) must leave the base model unchanged.
func TestFreshAdapterIsIdentity(t *testing.T) {
	m, _ := fixture(t, "tiny-qwen3")
	cfg := lora.Config{Rank: 4, Alpha: 8, Seed: 1}
	cfg.Targets(true, true, true)
	fresh, _ := lora.New(m.Cfg(), cfg)
	seq := randTokens(rng.New(1), 20, m.Cfg().Vocab)
	a, _ := m.Forward(nil, Pack([][]int{seq}), nil)
	b, _ := m.Forward(fresh, Pack([][]int{seq}), nil)
	near(t, "fresh adapter", b.Hidden, a.Hidden, 0)
	inf, _ := m.Infer(fresh, Pack([][]int{seq}), nil)
	near(t, "Infer", inf.Hidden, b.Hidden, 0)
}
