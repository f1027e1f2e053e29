package sampler

import (
	"math"
	"sort"
	"sync"

	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/rng"
)

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
func pick(row []float32, p *Params, r *rng.Source) (int, float64) {
	if p.Temperature == 0 {
		lse := ops.LogSumExp(row)
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return best, float64(row[best]) - lse
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
	u := r.Float64() * total
	chosen := len(e) - 1
	for i, v := range e {
		if u < float64(v) {
			chosen = i
			break
		}
		u -= float64(v)
	}
	lse := mx + math.Log(total) // the sum ops.LogSumExp takes, at temperature 1
	if p.Temperature != 1 || math.IsInf(mx, 0) || math.IsNaN(mx) {
		lse = ops.LogSumExp(row)
	}
	return chosen, float64(row[chosen]) - lse
}

// pickFiltered is pick under min_p, top_k or top_p: the survivors of
// distribution, renormalised, walked by one uniform. e holds the tokens'
// probabilities relative to the top token's.
func pickFiltered(row, e []float32, p *Params, r *rng.Source) (int, float64) {
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
	chosen := cands[len(cands)-1].tok
	for _, c := range cands {
		if u < c.p {
			chosen = c.tok
			break
		}
		u -= c.p
	}
	return chosen, float64(row[chosen]) - lse
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
	for i, x := range e {
		if float64(x) >= p.MinP { // min_p: p_i >= min_p · p_max, with p_max = 1 here
			cands = append(cands, candidate{i, float64(x)})
		}
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
