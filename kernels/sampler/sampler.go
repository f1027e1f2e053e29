package sampler

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/rng"
	"github.com/wts-project/wts/kernels/transformer"
)

// Request is one sample call.
type Request struct {
	Prompt                []int
	Params                Params
	NumSamples            int
	IncludePromptLogprobs bool
	TopKPromptLogprobs    int // 0..100
}

// Stop reasons.
const (
	StopToken  = "stop"   // a stop token was sampled (and is included)
	StopLength = "length" // max_tokens was reached
)

// Sequence is one generated continuation.
type Sequence struct {
	Tokens     []int     `json:"tokens"`
	Logprobs   []float64 `json:"logprobs"` // of each token in Tokens, under the model
	StopReason string    `json:"stop_reason"`
}

// TokenLogprob is one entry of a top-k list.
type TokenLogprob struct {
	Token   int     `json:"token"`
	Logprob float64 `json:"logprob"`
}

// Result is a sample call's output. Prompt logprobs have one entry per prompt
// token; entry 0 is nil because nothing predicts the first token.
type Result struct {
	Sequences          []Sequence       `json:"sequences"`
	PromptLogprobs     []*float64       `json:"prompt_logprobs,omitempty"`
	TopKPromptLogprobs [][]TokenLogprob `json:"topk_prompt_logprobs,omitempty"`
}

// Validate checks a request against the API's limits and the model.
func (q *Request) Validate(vocab, maxPos int) error {
	if len(q.Prompt) == 0 {
		return fmt.Errorf("%w: prompt has no tokens", kerr.ErrEmptyInput)
	}
	if q.NumSamples < 1 || q.NumSamples > MaxSamples {
		return fmt.Errorf("%w: num_samples %d is outside 1..%d", kerr.ErrSampleParams, q.NumSamples, MaxSamples)
	}
	if q.TopKPromptLogprobs < 0 || q.TopKPromptLogprobs > MaxTopKPromptLogp {
		return fmt.Errorf("%w: topk_prompt_logprobs %d is outside 0..%d", kerr.ErrSampleParams, q.TopKPromptLogprobs, MaxTopKPromptLogp)
	}
	if err := q.Params.Validate(vocab); err != nil {
		return err
	}
	if err := CheckTokens(q.Prompt, vocab); err != nil {
		return err
	}
	if n := len(q.Prompt) + q.Params.MaxTokens; n > maxPos {
		return fmt.Errorf("%w: prompt of %d tokens plus max_tokens %d exceeds the context of %d",
			kerr.ErrTooLong, len(q.Prompt), q.Params.MaxTokens, maxPos)
	}
	return nil
}

// CheckTokens refuses a token id outside the vocabulary.
func CheckTokens(toks []int, vocab int) error {
	for _, t := range toks {
		if t < 0 || t >= vocab {
			return fmt.Errorf("%w: token id %d, vocabulary [0, %d)", kerr.ErrTokenRange, t, vocab)
		}
	}
	return nil
}

// Sample runs a request on model m with adapter z (m.Freeze(ad); nil for the
// base model).
// The prompt is prefilled once; all samples decode together, one batched
// forward pass per generated position.
func Sample(m *transformer.Model[float32], z *transformer.Frozen[float32], q Request) (*Result, error) {
	c := m.Cfg()
	if err := q.Validate(c.Vocab, c.MaxPos); err != nil {
		return nil, err
	}
	root := m.NewCache()
	hidden, err := m.Extend(z, root, q.Prompt)
	if err != nil {
		return nil, err
	}
	res := &Result{Sequences: make([]Sequence, q.NumSamples)}
	P, D := len(q.Prompt), c.Hidden
	var last []float32
	wantPrompt := q.IncludePromptLogprobs || q.TopKPromptLogprobs > 0
	if wantPrompt {
		res.PromptLogprobs, res.TopKPromptLogprobs = promptLogprobs(m, z, hidden, q.Prompt, q.TopKPromptLogprobs, &last)
		if !q.IncludePromptLogprobs {
			res.PromptLogprobs = nil
		}
	} else {
		m.Logits(z, hidden[(P-1)*D:], 1, nil, func(_ int, row []float32) {
			last = append([]float32(nil), row...)
		})
	}

	seed := newSeed()
	if q.Params.Seed != nil {
		seed = *q.Params.Seed
	}
	stop := map[int]bool{}
	for _, t := range q.Params.StopTokenIDs {
		stop[t] = true
	}
	streams := make([]*rng.Source, q.NumSamples)
	caches := make([]*transformer.Cache[float32], q.NumSamples)
	for i := range streams {
		// Sample i's stream depends only on (seed, i): reproducible whatever
		// else is batched with it.
		streams[i] = rng.Derive(seed, uint64(i))
		caches[i] = root.Fork()
		m.Reserve(caches[i], q.Params.MaxTokens)
	}
	// draw appends sample i's next token from its logits row. The head calls
	// it from several goroutines at once, for distinct samples.
	draw := func(i int, row []float32) {
		tok, lp := pick(row, &q.Params, streams[i])
		s := &res.Sequences[i]
		s.Tokens = append(s.Tokens, tok)
		s.Logprobs = append(s.Logprobs, lp)
		switch {
		case stop[tok]:
			s.StopReason = StopToken
		case len(s.Tokens) >= q.Params.MaxTokens:
			s.StopReason = StopLength
		}
	}
	active := make([]int, q.NumSamples) // indices of unfinished samples
	for i := range active {
		active[i] = i
		draw(i, last)
	}
	ar := transformer.NewArena[float32]() // the head's logits, reused every step
	for {
		next := active[:0:0]
		var feed []int
		var feedCaches []*transformer.Cache[float32]
		for _, i := range active {
			if s := &res.Sequences[i]; s.StopReason == "" {
				next = append(next, i)
				feed = append(feed, s.Tokens[len(s.Tokens)-1])
				feedCaches = append(feedCaches, caches[i])
			}
		}
		active = next
		if len(active) == 0 {
			break
		}
		h, err := m.Decode(z, feedCaches, feed)
		if err != nil {
			return nil, err
		}
		ar.Reset()
		m.Logits(z, h, len(active), ar, func(b int, row []float32) {
			draw(active[b], row)
		})
	}
	return res, nil
}

// promptLogprobs scores every prompt token given its prefix, and optionally
// lists the top k tokens at each position. It also hands back the logits of
// the last position, from which the first new token is sampled.
func promptLogprobs(m *transformer.Model[float32], z *transformer.Frozen[float32], hidden []float32, prompt []int, k int, last *[]float32) ([]*float64, [][]TokenLogprob) {
	P := len(prompt)
	lps := make([]*float64, P)
	var top [][]TokenLogprob
	if k > 0 {
		top = make([][]TokenLogprob, P)
	}
	m.Logits(z, hidden, P, nil, func(t int, row []float32) {
		if t == P-1 {
			*last = append([]float32(nil), row...)
			return
		}
		lse := ops.LogSumExp(row)
		lp := float64(row[prompt[t+1]]) - lse
		lps[t+1] = &lp
		if k > 0 {
			top[t+1] = topK(row, k, lse)
		}
	})
	return lps, top
}

// topK returns the k most likely tokens of a row with their logprobs, most
// likely first (ties by token id).
func topK(row []float32, k int, lse float64) []TokenLogprob {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	k = min(k, len(row))
	sort.Slice(idx, func(a, b int) bool {
		if row[idx[a]] != row[idx[b]] {
			return row[idx[a]] > row[idx[b]]
		}
		return idx[a] < idx[b]
	})
	out := make([]TokenLogprob, k)
	for i := range out {
		out[i] = TokenLogprob{idx[i], float64(row[idx[i]]) - lse}
	}
	return out
}

// Logprobs returns the prompt logprobs of input (entry 0 nil): the logprobs
// primitive, under adapter z (nil for the base model).
func Logprobs(m *transformer.Model[float32], z *transformer.Frozen[float32], input []int) ([]*float64, error) {
	c := m.Cfg()
	if len(input) == 0 {
		return nil, fmt.Errorf("%w: input has no tokens", kerr.ErrEmptyInput)
	}
	if err := CheckTokens(input, c.Vocab); err != nil {
		return nil, err
	}
	if len(input) > c.MaxPos {
		return nil, fmt.Errorf("%w: %d tokens, context %d", kerr.ErrTooLong, len(input), c.MaxPos)
	}
	root := m.NewCache()
	hidden, err := m.Extend(z, root, input)
	if err != nil {
		return nil, err
	}
	var last []float32
	lps, _ := promptLogprobs(m, z, hidden, input, 0, &last)
	return lps, nil
}

func newSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
