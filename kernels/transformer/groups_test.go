package transformer

import (
	"math"
	"testing"

	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/rng"
)

// Several adapters' sequences in one pass (ForwardGroups, Head, Backward)
// must give each group the hidden states, logits and gradients a pass of
// its own gives, bit for bit: training then does not depend on which runs
// shared its passes. Short sequences (fewer rows than the products' tiles)
// and LM-head chunks that cut groups are included.
func TestGroupsMatchAlone(t *testing.T) {
	defer func(b int) { headBudget = b }(headBudget)
	for _, preset := range []string{"tiny", "tiny-qwen3"} {
		m, _ := fixture(t, preset)
		c := m.Cfg()
		D, V := c.Hidden, c.Vocab
		headBudget = 5 * V // chunks of 5 rows
		r := rng.New(9)
		adapter := func(rank int, attn, mlp, head bool) *lora.Adapter[float32] {
			cfg := lora.Config{Rank: rank, Alpha: 2 * float64(rank), Seed: uint64(rank)}
			cfg.Targets(attn, mlp, head)
			ad, err := lora.New(c, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ad.Params() {
				for i := range p.Data {
					p.Data[i] = float32(r.Uniform(-0.1, 0.1))
				}
			}
			return ad
		}
		ads := []*lora.Adapter[float32]{adapter(4, true, true, true), nil, adapter(2, true, false, false), adapter(8, false, true, true)}
		lengths := [][]int{{7, 2}, {3}, {1, 12, 2}, {9}}
		seqs := make([][][]int, len(ads))
		for g := range ads {
			for _, n := range lengths[g] {
				seqs[g] = append(seqs[g], randTokens(r, n, V))
			}
		}
		// pass runs groups [lo, hi) in one pass; it returns each group's
		// hidden states, logprobs and gradient.
		type result struct {
			hidden, logprobs []float32
			grads            *lora.Adapter[float32]
		}
		pass := func(lo, hi int) []result {
			var all [][]int
			var gs []Group[float32]
			res := make([]result, hi-lo)
			var owner [][2]int // row → (group, row within it)
			for g := lo; g < hi; g++ {
				all = append(all, seqs[g]...)
				if ads[g] != nil {
					res[g-lo].grads = ads[g].ZerosLike()
				}
				gs = append(gs, Group[float32]{Adapter: ads[g], Grads: res[g-lo].grads, Seqs: len(seqs[g])})
				local := 0
				for _, s := range seqs[g] {
					for range s {
						owner = append(owner, [2]int{g, local})
						local++
					}
				}
			}
			b := Pack(all)
			act, err := m.ForwardGroups(gs, b, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			T := len(b.Tokens)
			lps := make([]float32, T)
			dHidden := make([]float32, T*D)
			m.Head(act, dHidden, func(tk int, row []float32) bool {
				lps[tk] = float32(LogprobGrad(row, (owner[tk][1]*7+owner[tk][0])%V, func(lp float64) float64 { return -1 - math.Abs(lp)/10 }))
				return true
			})
			m.Backward(act, dHidden)
			for t0, k := 0, 0; k < len(res); k++ {
				n := 0
				for _, s := range seqs[lo+k] {
					n += len(s)
				}
				res[k].hidden = append([]float32(nil), act.Hidden[t0*D:(t0+n)*D]...)
				res[k].logprobs = lps[t0 : t0+n]
				t0 += n
			}
			return res
		}
		shared := pass(0, len(ads))
		for g := range ads {
			alone := pass(g, g+1)[0]
			same(t, preset, "hidden", g, alone.hidden, shared[g].hidden)
			same(t, preset, "logprobs", g, alone.logprobs, shared[g].logprobs)
			if ads[g] == nil {
				continue
			}
			pa, ps := alone.grads.Params(), shared[g].grads.Params()
			for i := range pa {
				same(t, preset, pa[i].Name, g, pa[i].Data, ps[i].Data)
			}
		}
	}
}

func same(t *testing.T, preset, what string, g int, alone, shared []float32) {
	t.Helper()
	for i := range alone {
		if math.Float32bits(alone[i]) != math.Float32bits(shared[i]) {
			t.Fatalf("%s group %d %s[%d]: %v alone, %v shared", preset, g, what, i, alone[i], shared[i])
		}
	}
}
