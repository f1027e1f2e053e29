package sampler

import (
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
	lse := ops.LogSumExp(row)
	if p.Temperature == 0 {
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return best, float64(row[best]) - lse
	}
	buf := scratch.Get().(*[]candidate)
	defer scratch.Put(buf)
	cands := distribution(row, p, *buf)
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

// scratch holds candidate buffers: without truncation every token of the
// vocabulary survives (2.4 MB for a 150k vocabulary), and growing a fresh
// buffer for every sample of every request cost a tenth of batched decoding.
// Pooled, there are about as many as goroutines drawing at once.
var scratch = sync.Pool{New: func() any { return new([]candidate) }}

// distribution returns the surviving tokens and their unnormalised
// probabilities after temperature, min_p, top_k and top_p, ordered by token
// id unless top_k or top_p needed a sort (then by falling probability).
func distribution(row []float32, p *Params, buf []candidate) []candidate {
	inv := 1 / p.Temperature
	mx := float64(row[0])
	for _, v := range row {
		mx = max(mx, float64(v))
	}
	// Probabilities relative to the top token's: exp((z - zmax)/T) ∈ (0, 1],
	// computed a chunk at a time with the vectorised exp.
	cands := buf[:0]
	var q [256]float32
	for c := 0; c < len(row); c += len(q) {
		chunk := row[c:min(c+len(q), len(row))]
		qs := q[:len(chunk)]
		for i, v := range chunk {
			qs[i] = float32((float64(v) - mx) * inv)
		}
		ops.ExpSlice(qs, qs)
		for i, e := range qs {
			if float64(e) >= p.MinP { // min_p: p_i >= min_p · p_max, with p_max = 1 here
				cands = append(cands, candidate{c + i, float64(e)})
			}
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
