package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/optim"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/sampler"
	"github.com/wts-project/wts/kernels/transformer"
)

func newTrainer(t testing.TB, preset string, rank int) *Trainer {
	t.Helper()
	w, err := model.Random(model.Presets[preset], 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := lora.Config{Rank: rank, Alpha: float64(rank), Seed: 3}
	cfg.Targets(true, true, true)
	ad, err := lora.New(w.Cfg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return NewTrainer(transformer.New(w), ad)
}

func ceBatch(r *rng.Source, n, length, vocab int) []Datum {
	var data []Datum
	for i := 0; i < n; i++ {
		toks := make([]int, length+1)
		for j := range toks {
			toks[j] = int(r.Uint64() % uint64(vocab))
		}
		data = append(data, Datum{ModelInput: toks[:length], Loss: loss.Inputs{TargetTokens: toks[1:]}})
	}
	return data
}

func paramsEqual(t *testing.T, a, b *lora.Adapter[float32], tol float64) {
	t.Helper()
	pa, pb := a.Params(), b.Params()
	for i := range pa {
		for j := range pa[i].Data {
			if math.Abs(float64(pa[i].Data[j]-pb[i].Data[j])) > tol {
				t.Fatalf("%s[%d]: %v vs %v", pa[i].Name, j, pa[i].Data[j], pb[i].Data[j])
			}
		}
	}
}

// Gradients accumulate: two forward_backward calls on halves of a batch then
// a step equal one call on the whole batch then a step.
func TestAccumulationEqualsWholeBatch(t *testing.T) {
	data := ceBatch(rng.New(1), 4, 6, 96)
	whole, split := newTrainer(t, "tiny", 4), newTrainer(t, "tiny", 4)
	if _, err := whole.ForwardBackward(context.Background(), data, "cross_entropy", nil); err != nil {
		t.Fatal(err)
	}
	for _, part := range [][]Datum{data[:1], data[1:]} {
		if _, err := split.ForwardBackward(context.Background(), part, "cross_entropy", nil); err != nil {
			t.Fatal(err)
		}
	}
	if split.PendingGradients() != 2 {
		t.Fatalf("pending %d", split.PendingGradients())
	}
	paramsEqual(t, whole.grads, split.grads, 1e-6)
	p := optim.Defaults()
	p.LR = 1e-2
	for _, tr := range []*Trainer{whole, split} {
		if _, err := tr.OptimStep(p); err != nil {
			t.Fatal(err)
		}
	}
	paramsEqual(t, whole.Adapter(), split.Adapter(), 1e-6)
	if split.PendingGradients() != 0 || split.Steps() != 1 {
		t.Fatal("step did not clear the accumulator")
	}
}

func TestNonFiniteRefused(t *testing.T) {
	tr := newTrainer(t, "tiny", 2)
	good := ceBatch(rng.New(2), 1, 4, 96)
	if _, err := tr.ForwardBackward(context.Background(), good, "cross_entropy", nil); err != nil {
		t.Fatal(err)
	}
	before := tr.grads.Clone()
	// A sampler logprob of -1000 makes the importance ratio overflow to +Inf.
	bad := []Datum{{ModelInput: []int{1, 2}, Loss: loss.Inputs{TargetTokens: []int{3, 4},
		Logprobs: []float64{-1000, -1}, Advantages: []float64{1, 1}}}}
	if _, err := tr.ForwardBackward(context.Background(), bad, "importance_sampling", nil); !errors.Is(err, kerr.ErrNonFinite) {
		t.Fatalf("err %v", err)
	}
	paramsEqual(t, before, tr.grads, 0)
	if tr.PendingGradients() != 1 {
		t.Fatal("refused call counted")
	}
	adBefore := tr.Adapter().Clone()
	if _, err := tr.OptimStep(optim.Params{LR: 1, Beta1: 2, Beta2: 0.9, Eps: 1}); !errors.Is(err, kerr.ErrOptimParams) {
		t.Fatalf("bad params: %v", err)
	}
	paramsEqual(t, adBefore, tr.Adapter(), 0)
	paramsEqual(t, before, tr.grads, 0)
}

func TestBadInputs(t *testing.T) {
	tr := newTrainer(t, "tiny", 2)
	cases := []struct {
		data []Datum
		loss string
		want error
	}{
		{nil, "cross_entropy", kerr.ErrEmptyInput},
		{[]Datum{{ModelInput: []int{1}, Loss: loss.Inputs{TargetTokens: []int{96}}}}, "cross_entropy", kerr.ErrTokenRange},
		{[]Datum{{ModelInput: []int{1, 2}, Loss: loss.Inputs{TargetTokens: []int{3}}}}, "cross_entropy", kerr.ErrLossInputs},
		{[]Datum{{ModelInput: []int{1}, Loss: loss.Inputs{TargetTokens: []int{3}}}}, "ppo", kerr.ErrLossInputs},
		{[]Datum{{ModelInput: []int{1}, Loss: loss.Inputs{TargetTokens: []int{3}}}}, "hinge", kerr.ErrUnknownLoss},
		{[]Datum{{ModelInput: make([]int, 129), Loss: loss.Inputs{TargetTokens: make([]int, 129)}}}, "cross_entropy", kerr.ErrTooLong},
		{[]Datum{{ModelInput: []int{1}, Loss: loss.Inputs{TargetTokens: []int{3}, Weights: []float64{math.NaN()}}}}, "cross_entropy", kerr.ErrLossInputs},
	}
	for i, c := range cases {
		if _, err := tr.ForwardBackward(context.Background(), c.data, c.loss, nil); !errors.Is(err, c.want) {
			t.Fatalf("case %d: %v, want %v", i, err, c.want)
		}
	}
	if tr.PendingGradients() != 0 {
		t.Fatal("a refused batch counted")
	}
}

// Saving, loading and going on gives the same adapter as never stopping.
func TestStateRoundTrip(t *testing.T) {
	data := ceBatch(rng.New(3), 3, 5, 96)
	p := optim.Defaults()
	p.LR = 5e-3
	a := newTrainer(t, "tiny-qwen2", 4)
	for i := 0; i < 2; i++ {
		a.ForwardBackward(context.Background(), data, "cross_entropy", nil)
		a.OptimStep(p)
	}
	dir := t.TempDir()
	if err := a.SaveState(dir, "tiny-qwen2"); err != nil {
		t.Fatal(err)
	}
	b, err := LoadState(dir, a.Model())
	if err != nil {
		t.Fatal(err)
	}
	if b.Steps() != 2 || b.Adapter().Cfg.Seed != 3 {
		t.Fatalf("steps %d seed %d", b.Steps(), b.Adapter().Cfg.Seed)
	}
	for _, tr := range []*Trainer{a, b} {
		tr.ForwardBackward(context.Background(), data, "cross_entropy", nil)
		tr.OptimStep(p)
	}
	paramsEqual(t, a.Adapter(), b.Adapter(), 0)
}

// Learning works: the adapter must learn a fixed random mapping from
// three-token prompts to an answer token; the loss falls and greedy sampling
// answers at least 95% of prompts exactly within a bounded number of steps.
func TestLearnsMapping(t *testing.T) {
	tr := newTrainer(t, "tiny", 8)
	r := rng.New(11)
	const pairs = 24
	var data []Datum
	answers := map[[3]int]int{}
	for len(data) < pairs {
		p := [3]int{1, 3 + int(r.Uint64()%90), 3 + int(r.Uint64()%90)}
		if _, dup := answers[p]; dup {
			continue
		}
		ans := 3 + int(r.Uint64()%90)
		answers[p] = ans
		// Only the answer position carries weight.
		data = append(data, Datum{ModelInput: p[:], Loss: loss.Inputs{TargetTokens: []int{p[1], p[2], ans}, Weights: []float64{0, 0, 1}}})
	}
	p := optim.Defaults()
	p.LR = 2e-2
	var first, last float64
	exact := 0
	for step := 0; step < 150; step++ {
		out, err := tr.ForwardBackward(context.Background(), data, "cross_entropy", nil)
		if err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			first = out.Metrics["loss:sum"]
		}
		last = out.Metrics["loss:sum"]
		if _, err := tr.OptimStep(p); err != nil {
			t.Fatal(err)
		}
		if step%10 != 9 {
			continue
		}
		exact = 0
		for prompt, ans := range answers {
			res, err := sampler.Sample(sampler.OnCPU(tr.Model()), tr.Model().Freeze(tr.Adapter()), sampler.Request{Prompt: prompt[:], NumSamples: 1,
				Params: sampler.Params{MaxTokens: 1, Temperature: 0, TopP: 1, TopK: -1}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Sequences[0].Tokens[0] == ans {
				exact++
			}
		}
		if float64(exact) >= 0.95*pairs {
			t.Logf("%d/%d exact after %d steps; loss %.3f -> %.3f", exact, pairs, step+1, first, last)
			return
		}
	}
	t.Fatalf("only %d/%d exact after 150 steps; loss %.3f -> %.3f", exact, pairs, first, last)
}

// BenchmarkForwardTiny is the service's smallest operation: a forward of
// one 16-token datum on the tiny model, where the engine's fixed costs per
// call (dispatch, packing, scratch) are nearly all of it. The API benchmark
// (bench/apibench) runs one per submission beside the HTTP work.
func BenchmarkForwardTiny(b *testing.B) {
	tr := newTrainer(b, "tiny", 4)
	data := ceBatch(rng.New(1), 1, 16, 96)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Forward(context.Background(), data, "cross_entropy", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSharedPasses is a forward of one short datum for each of 16
// runs on one base model: each run's pass alone, and the 16 in one shared
// pass (NextShared), which reads the base weights once for all of them.
// ns/forward is per run's forward.
func BenchmarkSharedPasses(b *testing.B) {
	for _, c := range []struct {
		preset string
		tokens int
	}{{"tiny", 16}, {"small", 4}, {"small", 16}} {
		w, err := model.Random(model.Presets[c.preset], 1)
		if err != nil {
			b.Fatal(err)
		}
		m := transformer.New(w)
		const runs = 16
		ar := transformer.NewArena[float32]()
		var trs []*Trainer
		for i := range runs {
			cfg := lora.Config{Rank: 4, Alpha: 4, Seed: uint64(i + 1)}
			cfg.Targets(true, true, true)
			ad, err := lora.New(w.Cfg, cfg)
			if err != nil {
				b.Fatal(err)
			}
			trs = append(trs, NewTrainer(m, ad))
			trs[i].UseArena(ar)
		}
		data := ceBatch(rng.New(1), 1, c.tokens, w.Cfg.Vocab)
		ctxs := make([]context.Context, runs)
		for i := range ctxs {
			ctxs[i] = context.Background()
		}
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("%s/%dtokens/%s", c.preset, c.tokens, map[bool]string{false: "alone", true: "shared"}[shared])
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					ps := make([]*Pass, runs)
					for i, tr := range trs {
						if ps[i], err = tr.Begin(data, "cross_entropy", nil, false); err != nil {
							b.Fatal(err)
						}
						if !shared {
							if err := ps[i].Next(context.Background()); err != nil {
								b.Fatal(err)
							}
						}
					}
					if shared {
						if err := NextShared(ctxs, ps); err != nil {
							b.Fatal(err)
						}
					}
					for _, p := range ps {
						if _, err := p.Output(); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*runs), "ns/forward")
			})
		}
	}
}

// Trainers that share one arena, taking turns with batches of other shapes,
// compute exactly what trainers with arenas of their own do: nothing a pass
// leaves in the arena reaches the next one.
func TestSharedArena(t *testing.T) {
	run := func(shared bool) (outs []*Output, ads []*lora.Adapter[float32]) {
		a, b := newTrainer(t, "tiny", 4), newTrainer(t, "tiny", 2)
		if shared {
			ar := transformer.NewArena[float32]()
			a.UseArena(ar)
			b.UseArena(ar)
		}
		r := rng.New(9)
		for i := range 3 {
			for k, tr := range []*Trainer{a, b} {
				data := ceBatch(r, 1+i+k, 5+7*i-3*k, 96)
				fb, err := tr.ForwardBackward(context.Background(), data, "cross_entropy", nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tr.OptimStep(optim.Params{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12}); err != nil {
					t.Fatal(err)
				}
				fw, err := tr.Forward(context.Background(), ceBatch(r, 2, 9-i, 96), "cross_entropy", nil)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, fb, fw)
			}
		}
		return outs, []*lora.Adapter[float32]{a.Adapter(), b.Adapter()}
	}
	own, ownAds := run(false)
	shared, sharedAds := run(true)
	for i := range own {
		for d := range own[i].Logprobs {
			for p, v := range own[i].Logprobs[d] {
				if w := shared[i].Logprobs[d][p]; w != v {
					t.Fatalf("call %d, datum %d, position %d: logprob %v with a shared arena, %v without", i, d, p, w, v)
				}
			}
		}
	}
	for i := range ownAds {
		paramsEqual(t, ownAds[i], sharedAds[i], 0)
	}
}

// Several runs' passes on one base model, run together a micro-batch at a
// time (NextShared), must give each run the logprobs, losses and, after
// the optimiser step, the adapter that its passes alone give, bit for bit:
// a rebuilt trainer replays its operations alone and must reach the state
// its callers saw. The runs differ in rank, targets, loss and batch, and
// one batch takes two micro-batches.
func TestSharedPassesMatchAlone(t *testing.T) {
	w, err := model.Random(model.Presets["tiny-qwen3"], 1)
	if err != nil {
		t.Fatal(err)
	}
	m := transformer.New(w)
	type run struct {
		rank             int
		attn, mlp, embed bool
		loss             string
		data             []Datum
	}
	r := rng.New(6)
	rl := ceBatch(r, 3, 20, w.Cfg.Vocab)
	for i := range rl {
		for range rl[i].Loss.TargetTokens {
			rl[i].Loss.Logprobs = append(rl[i].Loss.Logprobs, -r.Uniform(0.5, 5))
			rl[i].Loss.Advantages = append(rl[i].Loss.Advantages, r.Uniform(-1, 1))
		}
	}
	runs := []run{
		{4, true, true, true, "cross_entropy", ceBatch(r, 40, 120, w.Cfg.Vocab)}, // 4,800 tokens: two micro-batches
		{2, true, false, false, "importance_sampling", rl},
		{8, false, true, true, "cross_entropy", ceBatch(r, 1, 3, w.Cfg.Vocab)},
	}
	trainers := func() []*Trainer {
		var ts []*Trainer
		for i, rn := range runs {
			cfg := lora.Config{Rank: rn.rank, Alpha: float64(2 * rn.rank), Seed: uint64(i + 1)}
			cfg.Targets(rn.attn, rn.mlp, rn.embed)
			ad, err := lora.New(w.Cfg, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, NewTrainer(m, ad))
		}
		return ts
	}
	for _, backward := range []bool{true, false} {
		alone, shared := trainers(), trainers()
		ar := transformer.NewArena[float32]()
		var want, got []*Output
		for i, tr := range alone {
			tr.UseArena(ar)
			p, err := tr.Begin(runs[i].data, runs[i].loss, nil, backward)
			if err != nil {
				t.Fatal(err)
			}
			for !p.Done() {
				if err := p.Next(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			out, err := p.Output()
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, out)
		}
		var ps []*Pass
		for i, tr := range shared {
			tr.UseArena(ar)
			p, err := tr.Begin(runs[i].data, runs[i].loss, nil, backward)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		for {
			var left []*Pass
			var ctxs []context.Context
			for _, p := range ps {
				if !p.Done() {
					left, ctxs = append(left, p), append(ctxs, context.Background())
				}
			}
			if len(left) == 0 {
				break
			}
			if err := NextShared(ctxs, left); err != nil {
				t.Fatal(err)
			}
		}
		for i, p := range ps {
			out, err := p.Output()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out)
			for d := range want[i].Logprobs {
				for j, lp := range want[i].Logprobs[d] {
					if math.Float64bits(lp) != math.Float64bits(out.Logprobs[d][j]) {
						t.Fatalf("backward %v run %d datum %d logprob %d: %v alone, %v shared", backward, i, d, j, lp, out.Logprobs[d][j])
					}
				}
				if math.Float64bits(want[i].Losses[d]) != math.Float64bits(out.Losses[d]) {
					t.Fatalf("backward %v run %d datum %d loss: %v alone, %v shared", backward, i, d, want[i].Losses[d], out.Losses[d])
				}
			}
			if !backward {
				continue
			}
			for _, tr := range []*Trainer{alone[i], shared[i]} {
				if _, err := tr.OptimStep(optim.Params{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}); err != nil {
					t.Fatal(err)
				}
			}
			paramsEqual(t, alone[i].Adapter(), shared[i].Adapter(), 0)
		}
	}
}
