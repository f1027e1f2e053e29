package sampler

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sort"
	"testing"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/lora"
	"github.com/wts-project/wts/kernels/loss"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/train"
	"github.com/wts-project/wts/kernels/transformer"
)

// refProbs is the filtered sampling distribution written the long way: full
// softmax at temperature T, drop tokens under min_p·max, keep the k best,
// keep the top_p nucleus, renormalise.
func refProbs(logits []float64, p Params) []float64 {
	n := len(logits)
	probs := make([]float64, n)
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, l/p.Temperature)
	}
	var z float64
	for i, l := range logits {
		probs[i] = math.Exp(l/p.Temperature - mx)
		z += probs[i]
	}
	pmax := 0.0
	for i := range probs {
		probs[i] /= z
		pmax = math.Max(pmax, probs[i])
	}
	for i := range probs {
		if probs[i] < p.MinP*pmax {
			probs[i] = 0
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
	if p.TopK > 0 {
		for _, i := range order[min(p.TopK, n):] {
			probs[i] = 0
		}
	}
	var mass float64
	for _, v := range probs {
		mass += v
	}
	var cum float64
	cut := false
	for _, i := range order {
		if cut {
			probs[i] = 0
			continue
		}
		cum += probs[i]
		if cum >= p.TopP*mass {
			cut = true
		}
	}
	z = 0
	for _, v := range probs {
		z += v
	}
	for i := range probs {
		probs[i] /= z
	}
	return probs
}

// chiSquare draws n tokens with pick and tests them against want. The bound
// is the 0.999 quantile of χ² (normal approximation), so a correct sampler
// fails about once in a thousand seeds; the seeds here are fixed.
func chiSquare(t *testing.T, what string, row []float32, p Params, want []float64, n int) {
	t.Helper()
	counts := make([]float64, len(row))
	r := rng.New(77)
	for i := 0; i < n; i++ {
		tok, _, err := pick(row, &p, r)
		if err != nil {
			t.Fatal(err)
		}
		counts[tok]++
	}
	var chi float64
	df := -1
	for i, w := range want {
		e := w * float64(n)
		if w == 0 {
			if counts[i] != 0 {
				t.Fatalf("%s: token %d has probability 0 but was drawn %v times", what, i, counts[i])
			}
			continue
		}
		chi += (counts[i] - e) * (counts[i] - e) / e
		df++
	}
	if df == 0 {
		return
	}
	bound := float64(df) + 3.09*math.Sqrt(2*float64(df)) + 10
	if chi > bound {
		t.Fatalf("%s: chi-square %.1f with %d dof exceeds %.1f", what, chi, df, bound)
	}
}

func TestPickMatchesDistribution(t *testing.T) {
	r := rng.New(5)
	logits := make([]float64, 40)
	row := make([]float32, 40)
	for i := range logits {
		logits[i] = r.Uniform(-3, 3)
		row[i] = float32(logits[i])
		logits[i] = float64(row[i])
	}
	for _, p := range []Params{
		{Temperature: 1, TopP: 1, TopK: -1},
		{Temperature: 0.7, TopP: 1, TopK: 5},
		{Temperature: 1.3, TopP: 0.8, TopK: 0},
		{Temperature: 1, TopP: 1, TopK: -1, MinP: 0.2},
		{Temperature: 0.9, TopP: 0.9, TopK: 12, MinP: 0.05},
	} {
		chiSquare(t, "params", row, p, refProbs(logits, p), 40000)
	}
}

func TestGreedy(t *testing.T) {
	row := []float32{0.1, 2, -1, 2, 0.5}
	tok, lp, _ := pick(row, &Params{Temperature: 0}, nil)
	if tok != 1 {
		t.Fatalf("greedy picked %d", tok)
	}
	if want := 2 - transformerLSE(row); math.Abs(lp-want) > 1e-6 {
		t.Fatalf("logprob %v want %v", lp, want)
	}
}

func transformerLSE(row []float32) float64 {
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v))
	}
	return math.Log(s)
}

func fixture(t *testing.T) (Engine, *lora.Adapter[float32]) {
	t.Helper()
	return fixtureWith(t, transformer.Options{})
}

// fixtureWith is the tiny Qwen3-shaped model kept as o says, on the CPU,
// with an adapter whose B factors are random (B starts at zero otherwise).
func fixtureWith(t *testing.T, o transformer.Options) (Engine, *lora.Adapter[float32]) {
	t.Helper()
	w, err := model.Random(model.Presets["tiny-qwen3"], 8)
	if err != nil {
		t.Fatal(err)
	}
	cfg := lora.Config{Rank: 4, Alpha: 8, Seed: 2}
	cfg.Targets(true, true, true)
	ad, _ := lora.New(w.Cfg, cfg)
	r := rng.New(3)
	for _, p := range ad.Params() {
		for i := range p.Data {
			if !p.IsA {
				p.Data[i] = float32(r.Uniform(-0.5, 0.5)) // a peaked, non-uniform model
			}
		}
	}
	return OnCPU(transformer.NewWith(w, o)), ad
}

func seedPtr(s uint64) *uint64 { return &s }

func TestSeededReproducibleAcrossBatch(t *testing.T) {
	m, ad := fixture(t)
	p := Params{MaxTokens: 12, Temperature: 1, TopP: 1, TopK: -1, Seed: seedPtr(42)}
	one, err := Sample(m, m.Freeze(ad), Request{Prompt: []int{3, 4, 5}, Params: p, NumSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	many, err := Sample(m, m.Freeze(ad), Request{Prompt: []int{3, 4, 5}, Params: p, NumSamples: 8})
	if err != nil {
		t.Fatal(err)
	}
	a, b := one.Sequences[0], many.Sequences[0]
	if len(a.Tokens) != 12 || a.StopReason != StopLength {
		t.Fatalf("sequence %+v", a)
	}
	for i := range a.Tokens {
		if a.Tokens[i] != b.Tokens[i] || math.Abs(a.Logprobs[i]-b.Logprobs[i]) > 1e-5 {
			t.Fatalf("seeded sample 0 changed with the batch: %v vs %v", a.Tokens, b.Tokens)
		}
	}
	distinct := map[int]bool{}
	for _, s := range many.Sequences {
		distinct[s.Tokens[0]*1000+s.Tokens[1]] = true
	}
	if len(distinct) < 2 {
		t.Fatal("all samples identical: streams are not independent")
	}
}

// The logprob the sampler reports for each token must equal what a forward
// pass (the trainer's) computes for the same sequence.
func TestSampleLogprobsMatchForward(t *testing.T) {
	m, ad := fixture(t)
	prompt := []int{7, 8, 9, 10}
	res, err := Sample(m, m.Freeze(ad), Request{Prompt: prompt, NumSamples: 3,
		Params: Params{MaxTokens: 10, Temperature: 0.8, TopP: 0.9, TopK: 20, Seed: seedPtr(1)}})
	if err != nil {
		t.Fatal(err)
	}
	ce, _ := loss.New("cross_entropy", nil)
	for _, s := range res.Sequences {
		full := append(append([]int(nil), prompt...), s.Tokens...)
		d := train.Datum{ModelInput: full[:len(full)-1], Loss: loss.Inputs{TargetTokens: full[1:]}}
		out, err := train.Evaluate(context.Background(), m.(*cpuEngine).m, ad, []train.Datum{d}, ce, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, lp := range s.Logprobs {
			if f := out.Logprobs[0][len(prompt)-1+i]; math.Abs(f-lp) > 1e-4 {
				t.Fatalf("token %d: sampler logprob %v, forward %v", i, lp, f)
			}
		}
	}
}

func TestStopTokens(t *testing.T) {
	m, ad := fixture(t)
	all := make([]int, m.Config().Vocab)
	for i := range all {
		all[i] = i
	}
	res, err := Sample(m, m.Freeze(ad), Request{Prompt: []int{1}, NumSamples: 4, Params: Params{MaxTokens: 5, Temperature: 1, TopP: 1, TopK: -1, StopTokenIDs: all}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Sequences {
		if len(s.Tokens) != 1 || s.StopReason != StopToken {
			t.Fatalf("%+v", s)
		}
	}
}

func TestPromptLogprobs(t *testing.T) {
	m, ad := fixture(t)
	prompt := []int{5, 9, 2, 33, 7}
	res, err := Sample(m, m.Freeze(ad), Request{Prompt: prompt, NumSamples: 1, IncludePromptLogprobs: true, TopKPromptLogprobs: 3,
		Params: Params{MaxTokens: 1, Temperature: 0, TopP: 1, TopK: -1}})
	if err != nil {
		t.Fatal(err)
	}
	lps, err := Logprobs(m, m.Freeze(ad), prompt)
	if err != nil {
		t.Fatal(err)
	}
	if res.PromptLogprobs[0] != nil || lps[0] != nil || res.TopKPromptLogprobs[0] != nil {
		t.Fatal("entry 0 must be null")
	}
	for i := 1; i < len(prompt); i++ {
		if math.Abs(*res.PromptLogprobs[i]-*lps[i]) > 1e-6 {
			t.Fatalf("position %d: %v vs %v", i, *res.PromptLogprobs[i], *lps[i])
		}
		top := res.TopKPromptLogprobs[i]
		if len(top) != 3 || top[0].Logprob < top[1].Logprob || top[1].Logprob < top[2].Logprob || top[0].Logprob < *lps[i]-1e-9 {
			t.Fatalf("top-k at %d: %+v (token logprob %v)", i, top, *lps[i])
		}
	}
	// Greedy's first token is the most likely one after the prompt.
	best, bestLP := -1, math.Inf(-1)
	for tok := 0; tok < m.Config().Vocab; tok++ {
		l, _ := Logprobs(m, m.Freeze(ad), append(append([]int(nil), prompt...), tok))
		if lp := *l[len(prompt)]; lp > bestLP {
			best, bestLP = tok, lp
		}
	}
	if g := res.Sequences[0].Tokens[0]; g != best {
		t.Fatalf("greedy picked %d, most likely is %d", g, best)
	}
}

// End to end: first-token frequencies over many seeds follow the filtered
// softmax of the model's own last-position logits.
func TestSampleChiSquareEndToEnd(t *testing.T) {
	m, ad := fixture(t)
	prompt := []int{11, 12}
	// Recover the last-position logprobs over the whole vocabulary by scoring
	// each candidate token.
	V := m.Config().Vocab
	logits := make([]float64, V)
	for tok := 0; tok < V; tok++ {
		l, _ := Logprobs(m, m.Freeze(ad), []int{11, 12, tok})
		logits[tok] = *l[2]
	}
	p := Params{MaxTokens: 1, Temperature: 0.7, TopP: 0.95, TopK: 30}
	want := refProbs(logits, p)
	counts := make([]float64, V)
	const n = 12000
	for i := 0; i < n/64; i++ {
		p.Seed = seedPtr(uint64(i))
		res, err := Sample(m, m.Freeze(ad), Request{Prompt: prompt, NumSamples: 64, Params: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Sequences {
			counts[s.Tokens[0]]++
		}
	}
	total := float64(n / 64 * 64)
	var chi float64
	df := -1
	for i, w := range want {
		if w < 1e-4 { // the nucleus edge: too rare to test, must not be common
			if counts[i] > 5 {
				t.Fatalf("token %d outside the nucleus drawn %v times", i, counts[i])
			}
			continue
		}
		e := w * total
		chi += (counts[i] - e) * (counts[i] - e) / e
		df++
	}
	if bound := float64(df) + 3.09*math.Sqrt(2*float64(df)) + 10; chi > bound {
		t.Fatalf("chi-square %.1f with %d dof exceeds %.1f", chi, df, bound)
	}
}

func TestBadRequests(t *testing.T) {
	m, ad := fixture(t)
	ok := Params{MaxTokens: 1, Temperature: 1, TopP: 1, TopK: -1}
	cases := []struct {
		q    Request
		want error
	}{
		{Request{Prompt: nil, NumSamples: 1, Params: ok}, kerr.ErrEmptyInput},
		{Request{Prompt: []int{96}, NumSamples: 1, Params: ok}, kerr.ErrTokenRange},
		{Request{Prompt: []int{1}, NumSamples: 65, Params: ok}, kerr.ErrSampleParams},
		{Request{Prompt: []int{1}, NumSamples: 1, Params: Params{MaxTokens: 1, Temperature: 3, TopP: 1}}, kerr.ErrSampleParams},
		{Request{Prompt: []int{1}, NumSamples: 1, Params: Params{MaxTokens: 128, Temperature: 1, TopP: 1}}, kerr.ErrTooLong},
		{Request{Prompt: []int{1}, NumSamples: 1, Params: Params{MaxTokens: 1, Temperature: 1, TopP: 1, StopTokenIDs: []int{1000}}}, kerr.ErrTokenRange},
	}
	for i, c := range cases {
		if _, err := Sample(m, m.Freeze(ad), c.q); !errors.Is(err, c.want) {
			t.Fatalf("case %d: %v, want %v", i, err, c.want)
		}
	}
}

// TestStepMixesAdapters prefills and decodes requests of two adapters and
// of the base model in one batch: each gets what it gets alone (same
// tokens, same logprobs, prompt logprobs included, within float rounding),
// so batching samplers together changes no result; a request that fails
// its checks does not stop the others.
func TestStepMixesAdapters(t *testing.T) {
	m, ad := fixture(t)
	other := ad.Clone()
	r := rng.New(11)
	for _, p := range other.Params() {
		for i := range p.Data {
			p.Data[i] = float32(r.Uniform(-0.5, 0.5))
		}
	}
	adapters := []Adapter{m.Freeze(ad), m.Freeze(other), nil, m.Freeze(ad)}
	reqs := make([]Request, len(adapters))
	for i := range reqs {
		reqs[i] = Request{Prompt: []int{3, 4 + i, 5}, NumSamples: 1 + i%3,
			Params: Params{MaxTokens: 6 + 2*i, Temperature: 1, TopP: 1, TopK: -1, Seed: seedPtr(uint64(7 + i)), StopTokenIDs: []int{9}}}
	}
	reqs[1].IncludePromptLogprobs, reqs[2].TopKPromptLogprobs = true, 3
	reqs = append(reqs, Request{Prompt: []int{1}, NumSamples: 1, Params: Params{MaxTokens: 0, TopK: -1}}) // refused alone
	adapters = append(adapters, nil)
	streams, errs := StartMany(m, adapters, reqs) // prompts prefilled together
	if errs[4] == nil {
		t.Fatal("a request with max_tokens 0 was started")
	}
	reqs, streams = reqs[:4], streams[:4]
	for _, err := range errs[:4] {
		if err != nil {
			t.Fatal(err)
		}
	}
	for steps := 0; ; steps++ {
		live := streams[:0:0]
		for _, s := range streams {
			if !s.Done() {
				live = append(live, s)
			}
		}
		if len(live) == 0 {
			break
		}
		if steps > 20 {
			t.Fatal("streams do not finish")
		}
		if err := Step(live); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range reqs {
		alone, err := Sample(m, adapters[i], q)
		if err != nil {
			t.Fatal(err)
		}
		for k, w := range alone.PromptLogprobs {
			g := streams[i].Result().PromptLogprobs[k]
			if (w == nil) != (g == nil) || w != nil && math.Abs(*g-*w) > 1e-5 {
				t.Fatalf("request %d prompt logprob %d: batched %v, alone %v", i, k, g, w)
			}
		}
		if got := streams[i].Result().TopKPromptLogprobs; len(got) != len(alone.TopKPromptLogprobs) {
			t.Fatalf("request %d: %d top-k prompt rows batched, %d alone", i, len(got), len(alone.TopKPromptLogprobs))
		}
		for k, row := range alone.TopKPromptLogprobs {
			for r, a := range row {
				if b := streams[i].Result().TopKPromptLogprobs[k][r]; a.Token != b.Token || math.Abs(a.Logprob-b.Logprob) > 1e-5 {
					t.Fatalf("request %d top-k prompt logprobs differ: %v vs %v", i, a, b)
				}
			}
		}
		for j, want := range alone.Sequences {
			got := streams[i].Result().Sequences[j]
			if len(got.Tokens) != len(want.Tokens) || got.StopReason != want.StopReason {
				t.Fatalf("request %d sample %d: batched %v, alone %v", i, j, got, want)
			}
			for k := range want.Tokens {
				if got.Tokens[k] != want.Tokens[k] || math.Abs(got.Logprobs[k]-want.Logprobs[k]) > 1e-5 {
					t.Fatalf("request %d sample %d: batched %v %v, alone %v %v", i, j, got.Tokens, got.Logprobs, want.Tokens, want.Logprobs)
				}
			}
		}
	}
}

// The rows and parameters that once reached an index of -1: a denormal
// temperature with min_p (1/T is +Inf, every scaled logit NaN), and rows
// that hold NaN, +Inf or nothing finite. Each has a defined outcome: a
// token of probability above 0 with a finite logprob, or ErrNonFinite.
func TestPickDegenerate(t *testing.T) {
	row := []float32{0.5, 3, -1, float32(math.Inf(-1)), 2.9}
	for _, p := range []Params{
		{Temperature: 1e-320, TopP: 1, TopK: -1, MinP: 0.5},
		{Temperature: 1e-320, TopP: 0, TopK: 1, MinP: 1},
		{Temperature: 4e-6, TopP: 1, TopK: -1},
		{Temperature: 2, TopP: 0, TopK: -1, MinP: 1},
		{Temperature: 1, TopP: 1, TopK: -1, MinP: 1},
	} {
		tok, lp, err := pick(row, &p, rng.New(1))
		if err != nil || math.IsNaN(lp) || math.IsInf(lp, 0) {
			t.Fatalf("%+v: token %d logprob %v err %v", p, tok, lp, err)
		}
		if p.Temperature < minTemperature && tok != 1 {
			t.Errorf("%+v: a temperature below %g is greedy, drew %d", p, minTemperature, tok)
		}
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, bad := range [][]float32{
		{0, nan, 1},
		{0, inf, 1},
		{float32(math.Inf(-1)), float32(math.Inf(-1))},
	} {
		for _, p := range []Params{{Temperature: 0}, {Temperature: 1, TopP: 1, TopK: -1}, {Temperature: 0.5, TopP: 0.9, TopK: 3, MinP: 0.1}} {
			if _, _, err := pick(bad, &p, rng.New(1)); !errors.Is(err, kerr.ErrNonFinite) {
				t.Errorf("row %v %+v: err %v, want ErrNonFinite", bad, p, err)
			}
		}
	}
}

// FuzzPick draws from arbitrary rows under arbitrary parameters inside the
// API's ranges: it never panics, and a draw that succeeds is a token of the
// row with a finite logprob, allowed by top_k.
//
//	go test ./kernels/sampler -fuzz FuzzPick
func FuzzPick(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, 1e-320, 1.0, int64(-1), 0.5, uint64(1))
	f.Add([]byte{0, 0, 192, 127, 0, 0, 0, 64, 1, 2, 3, 4}, 0.7, 0.9, int64(2), 0.0, uint64(2))
	f.Add([]byte{0, 0, 128, 255, 0, 0, 128, 255}, 1.0, 0.0, int64(0), 1.0, uint64(3))
	f.Fuzz(func(t *testing.T, raw []byte, temp, topP float64, topK int64, minP float64, seed uint64) {
		row := make([]float32, len(raw)/4)
		for i := range row {
			row[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		p := Params{MaxTokens: 1, Temperature: temp, TopP: topP, TopK: int(max(min(topK, 1<<20), -1)), MinP: minP}
		if len(row) == 0 || p.Validate(len(row)) != nil {
			return
		}
		tok, lp, err := pick(row, &p, rng.New(seed))
		if err != nil {
			if !errors.Is(err, kerr.ErrNonFinite) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if tok < 0 || tok >= len(row) || math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 1e-6 {
			t.Fatalf("row %v %+v: token %d logprob %v", row, p, tok, lp)
		}
		if p.TopK > 0 && p.Temperature >= minTemperature {
			above := 0 // tokens clearly more likely (float32 ties break by id)
			for _, v := range row {
				if (float64(v)-float64(row[tok]))/p.Temperature > 1e-3 {
					above++
				}
			}
			if above >= p.TopK {
				t.Fatalf("top_k %d drew token %d with %d tokens above it", p.TopK, tok, above)
			}
		}
	})
}

// A cache or adapter another engine made is refused with an error, not a
// fault inside the pass.
func TestEngineRefusesForeignHandles(t *testing.T) {
	e, ad := fixture(t)
	other, _ := fixture(t)
	if err := e.Prefill([]Adapter{nil}, []Cache{other.NewCache()}, [][]int{{1, 2}}, []bool{false}, func(int, int, []float32) {}); !errors.Is(err, errForeign) {
		t.Fatalf("another engine's cache: %v", err)
	}
	if err := e.Step([]Adapter{foreignAdapter{ad}}, []Cache{e.NewCache()}, []int{1}, func(int, []float32) {}); !errors.Is(err, errForeign) {
		t.Fatalf("another engine's adapter: %v", err)
	}
}

type foreignAdapter struct{ ad *lora.Adapter[float32] }

func (f foreignAdapter) Source() *lora.Adapter[float32] { return f.ad }
