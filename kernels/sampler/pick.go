package sampler

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/rng"
)

// minTemperature is vLLM's sampling epsilon: a temperature below it samples
// greedily. Dividing by a smaller one overflows (1e-320 makes 1/T +Inf, and
// every probability NaN), and long before that every token but the top one
// has probability 0 in float32 anyway.
const minTemperature = 1e-5

// checkRow refuses a logits row that has no distribution: a NaN or +Inf
// anywhere, or no finite value at all. -Inf entries are tokens of
// probability 0 and are fine.
func checkRow(row []float32) error {
	finite := false
	for _, v := range row {
		switch {
		case v != v || math.IsInf(float64(v), 1):
			return fmt.Errorf("%w: the model produced a %v logit", kerr.ErrNonFinite, v)
		case !math.IsInf(float64(v), -1):
			finite = true
		}
	}
	if !finite {
		return fmt.Errorf("%w: every logit is -Inf", kerr.ErrNonFinite)
	}
	return nil
}

// candidate is a token still in the running, with its probability under the
// temperature-scaled distribution (not yet renormalised).
type candidate struct {
	tok int
	p   float64
}

// pick chooses the next token from one logits row and returns it with its
// logprob under the model's own distribution (temperature 1, no truncation):
// the value a forward pass gives for that token, which is what importance
// weights in RL losses compare against.
//
// Filters apply in vLLM's order: temperature, then min_p (relative to the top
// token's probability), then top_k, then top_p (the smallest set of most
// likely tokens whose mass reaches top_p). One uniform draw then walks the
// renormalised survivors, so a seeded stream gives the same token whatever
// else is being sampled.
//
// Every distribution has a defined outcome: a row without one (checkRow)
// is an error, a temperature under minTemperature is greedy, and the
// filters always leave the top token. The token drawn always has a
// probability above 0, so its logprob is finite.
func pick(row []float32, p *Params, r *rng.Source) (int, float64, error) {
	if err := checkRow(row); err != nil {
		return 0, 0, err
	}
	if p.Temperature < minTemperature {
		lse := ops.LogSumExp(row)
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return best, float64(row[best]) - lse, nil
	}
	eb := expScratch.Get().(*[]float32)
	defer expScratch.Put(eb)
	if cap(*eb) < len(row) {
		*eb = make([]float32, len(row))
	}
	e := (*eb)[:len(row)]
	top, total := ops.ScaledExps(e, row, 1/p.Temperature)
	mx := float64(top)
	if p.MinP > 0 || p.TopK > 0 || p.TopP < 1 {
		return pickFiltered(row, e, p, r)
	}
	// No filter: one uniform walks the probabilities by token id, as the
	// filtered path walks its survivors, so a seed draws the same token.
	// Rounding can leave u past the last step: the draw is then the last
	// token of probability above 0.
	u := r.Float64() * total
	chosen := -1
	for i, v := range e {
		if v <= 0 {
			continue
		}
		chosen = i
		if u < float64(v) {
			break
		}
		u -= float64(v)
	}
	lse := mx + math.Log(total) // the sum ops.LogSumExp takes, at temperature 1
	if p.Temperature != 1 {
		lse = ops.LogSumExp(row)
	}
	return chosen, float64(row[chosen]) - lse, nil
}

// pickFiltered is pick under min_p, top_k or top_p: the survivors of
// distribution, renormalised, walked by one uniform. e holds the tokens'
// probabilities relative to the top token's.
func pickFiltered(row, e []float32, p *Params, r *rng.Source) (int, float64, error) {
	lse := ops.LogSumExp(row)
	buf := scratch.Get().(*[]candidate)
	defer scratch.Put(buf)
	cands := distribution(e, p, *buf)
	*buf = cands
	var total float64
	for _, c := range cands {
		total += c.p
	}
	u := r.Float64() * total
	chosen := -1
	for _, c := range cands {
		if c.p <= 0 {
			continue
		}
		chosen = c.tok
		if u < c.p {
			break
		}
		u -= c.p
	}
	return chosen, float64(row[chosen]) - lse, nil
}

// expScratch holds the per-token probability buffers of pick (a vocabulary
// of float32 each), pooled like scratch.
var expScratch = sync.Pool{New: func() any { return new([]float32) }}

// scratch holds candidate buffers: without truncation every token of the
// vocabulary survives (2.4 MB for a 150k vocabulary), and growing a fresh
// buffer for every sample of every request cost a tenth of batched decoding.
// Pooled, there are about as many as goroutines drawing at once.
var scratch = sync.Pool{New: func() any { return new([]candidate) }}

// distribution returns the surviving tokens and their unnormalised
// probabilities after min_p, top_k and top_p, given e, every token's
// probability relative to the top token's (temperature applied), ordered by
// token id unless top_k or top_p needed a sort (then by falling
// probability).
func distribution(e []float32, p *Params, buf []candidate) []candidate {
	cands := buf[:0]
	top := 0
	for i, x := range e {
		if x > e[top] {
			top = i
		}
		if float64(x) >= p.MinP { // min_p: p_i >= min_p · p_max, with p_max = 1 here
			cands = append(cands, candidate{i, float64(x)})
		}
	}
	if len(cands) == 0 {
		// The top token's relative probability is 1, which min_p ≤ 1 keeps,
		// unless the exponential rounded it below: min_p never removes it.
		cands = append(cands, candidate{top, float64(e[top])})
	}
	k := p.TopK
	needSort := (k > 0 && k < len(cands)) || p.TopP < 1
	if !needSort {
		return cands
	}
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].p != cands[b].p {
			return cands[a].p > cands[b].p
		}
		return cands[a].tok < cands[b].tok
	})
	if k > 0 && k < len(cands) {
		cands = cands[:k]
	}
	if p.TopP < 1 {
		var total float64
		for _, c := range cands {
			total += c.p
		}
		// Keep the shortest prefix whose mass reaches top_p; always one token.
		var cum float64
		for i, c := range cands {
			cum += c.p
			if cum >= p.TopP*total {
				cands = cands[:i+1]
				break
			}
		}
	}
	return cands
}
