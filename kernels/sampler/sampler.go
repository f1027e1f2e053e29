package sampler

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

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
	if err := q.CheckRanges(); err != nil {
		return err
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

// CheckRanges checks the request against the API's ranges alone (no
// model): the request body's schema check uses it.
func (q *Request) CheckRanges() *RangeError {
	switch {
	case q.NumSamples < 1 || q.NumSamples > MaxSamples:
		return &RangeError{"num_samples", fmt.Sprintf("must be 1 to %d", MaxSamples)}
	case q.TopKPromptLogprobs < 0 || q.TopKPromptLogprobs > MaxTopKPromptLogp:
		return &RangeError{"topk_prompt_logprobs", fmt.Sprintf("must be 0 to %d", MaxTopKPromptLogp)}
	}
	return q.Params.checkRanges()
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
	s, err := Start(m, z, q)
	if err != nil {
		return nil, err
	}
	ar := transformer.NewArena[float32]()
	for !s.Done() {
		if err := Step([]*Stream{s}, ar); err != nil {
			return nil, err
		}
	}
	return s.Result(), s.Err()
}

// Stream is a sample request in flight: its prompt prefilled, its sequences
// decoding one token per Step. Step advances many streams at once, of any
// adapters over one base model, so that requests of several samplers share
// every base product.
type Stream struct {
	m       *transformer.Model[float32]
	z       *transformer.Frozen[float32]
	params  *Params
	res     *Result
	stop    map[int]bool
	streams []*rng.Source
	caches  []*transformer.Cache[float32]
	active  []int // unfinished samples

	// err is the first draw that failed (a logits row without a
	// distribution): the stream ends there, and Err reports it. Draws of
	// one step run on several goroutines.
	errMu sync.Mutex
	err   error
}

// Start prefills a request's prompt (with its prompt logprobs when asked)
// and draws each sample's first token.
func Start(m *transformer.Model[float32], z *transformer.Frozen[float32], q Request) (*Stream, error) {
	streams, errs := StartMany(m, []*transformer.Frozen[float32]{z}, []Request{q})
	return streams[0], errs[0]
}

// StartMany starts several requests (request i under adapter zs[i]) with
// their prompts prefilled together in one pass. A request that fails its
// checks gets its error and the others start.
func StartMany(m *transformer.Model[float32], zs []*transformer.Frozen[float32], qs []Request) ([]*Stream, []error) {
	c := m.Cfg()
	streams, errs := make([]*Stream, len(qs)), make([]error, len(qs))
	var ok []int
	var okZ []*transformer.Frozen[float32]
	var roots []*transformer.Cache[float32]
	var prompts [][]int
	for i, q := range qs {
		if errs[i] = q.Validate(c.Vocab, c.MaxPos); errs[i] != nil {
			continue
		}
		ok, okZ = append(ok, i), append(okZ, zs[i])
		roots, prompts = append(roots, m.NewCache()), append(prompts, q.Prompt)
	}
	if len(ok) == 0 {
		return streams, errs
	}
	hidden, err := m.ExtendRows(okZ, roots, prompts)
	for k, i := range ok {
		if err != nil {
			errs[i] = err
			continue
		}
		if streams[i] = begin(m, zs[i], qs[i], roots[k], hidden[k]); streams[i].err != nil {
			errs[i], streams[i] = streams[i].err, nil
		}
	}
	return streams, errs
}

// begin makes the stream of a prefilled request: its prompt logprobs when
// asked, each sample's cache and random stream, and its first tokens. A
// stream that could not start has err set.
func begin(m *transformer.Model[float32], z *transformer.Frozen[float32], q Request, root *transformer.Cache[float32], hidden []float32) *Stream {
	s := &Stream{m: m, z: z, params: &q.Params, res: &Result{Sequences: make([]Sequence, q.NumSamples)}, stop: map[int]bool{}}
	P, D := len(q.Prompt), m.Cfg().Hidden
	var last []float32
	if q.IncludePromptLogprobs || q.TopKPromptLogprobs > 0 {
		s.res.PromptLogprobs, s.res.TopKPromptLogprobs, s.err = promptLogprobs(m, z, hidden, q.Prompt, q.TopKPromptLogprobs, &last)
		if s.err != nil {
			return s
		}
		if !q.IncludePromptLogprobs {
			s.res.PromptLogprobs = nil
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
	for _, t := range q.Params.StopTokenIDs {
		s.stop[t] = true
	}
	s.streams = make([]*rng.Source, q.NumSamples)
	s.caches = make([]*transformer.Cache[float32], q.NumSamples)
	for i := range s.streams {
		// Sample i's stream depends only on (seed, i): reproducible whatever
		// else is batched with it.
		s.streams[i] = rng.Derive(seed, uint64(i))
		s.caches[i] = root.Fork()
		m.Reserve(s.caches[i], q.Params.MaxTokens)
	}
	for i := range q.NumSamples {
		s.draw(i, last)
	}
	s.prune()
	return s
}

// draw appends sample i's next token from its logits row. Step calls it
// from several goroutines at once, for distinct samples.
func (s *Stream) draw(i int, row []float32) {
	tok, lp, err := pick(row, s.params, s.streams[i])
	if err != nil {
		s.errMu.Lock()
		if s.err == nil {
			s.err = fmt.Errorf("sample %d, token %d: %w", i, len(s.res.Sequences[i].Tokens), err)
		}
		s.errMu.Unlock()
		return
	}
	seq := &s.res.Sequences[i]
	seq.Tokens = append(seq.Tokens, tok)
	seq.Logprobs = append(seq.Logprobs, lp)
	switch {
	case s.stop[tok]:
		seq.StopReason = StopToken
	case len(seq.Tokens) >= s.params.MaxTokens:
		seq.StopReason = StopLength
	}
}

// prune keeps the samples that have not stopped; a failed stream has none.
func (s *Stream) prune() {
	s.active = s.active[:0]
	if s.err != nil {
		return
	}
	for i := range s.res.Sequences {
		if s.res.Sequences[i].StopReason == "" {
			s.active = append(s.active, i)
		}
	}
}

// Model is the base model the stream decodes on.
func (s *Stream) Model() *transformer.Model[float32] { return s.m }

// Progress counts the tokens drawn so far over every sample, and the
// samples that have stopped.
func (s *Stream) Progress() (tokens, stopped int) {
	for _, q := range s.res.Sequences {
		tokens += len(q.Tokens)
	}
	return tokens, len(s.res.Sequences) - len(s.active)
}

// Done reports whether every sample has stopped, or the stream failed.
func (s *Stream) Done() bool { return len(s.active) == 0 }

// Err is why the stream failed, once Done; nil when it succeeded.
func (s *Stream) Err() error { return s.err }

// Result is the request's output, complete once Done without Err.
func (s *Stream) Result() *Result { return s.res }

// Step decodes one more token for every unfinished sample of every stream
// (all over the same base model) in one batched pass: the base weights are
// read once for all rows, each adapter's LoRA terms apply to its own rows.
// ar holds the logits between steps (reuse it).
func Step(streams []*Stream, ar *transformer.Arena[float32]) error {
	var zs []*transformer.Frozen[float32]
	var caches []*transformer.Cache[float32]
	var feed []int
	type row struct {
		s *Stream
		i int
	}
	var rows []row
	for _, s := range streams {
		for _, i := range s.active {
			seq := &s.res.Sequences[i]
			zs, caches = append(zs, s.z), append(caches, s.caches[i])
			feed, rows = append(feed, seq.Tokens[len(seq.Tokens)-1]), append(rows, row{s, i})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	m := streams[0].m
	ar.Reset() // the last step's buffers are dead
	h, err := m.DecodeRows(zs, caches, feed, ar)
	if err != nil {
		return err
	}
	m.LogitsRows(zs, h, len(rows), ar, func(b int, logits []float32) {
		rows[b].s.draw(rows[b].i, logits)
	})
	for _, s := range streams {
		s.prune()
	}
	return nil
}

// promptLogprobs scores every prompt token given its prefix, and optionally
// lists the top k tokens at each position. It also hands back the logits of
// the last position, from which the first new token is sampled. A row
// without a distribution (checkRow) is an error: its logprobs would be NaN.
func promptLogprobs(m *transformer.Model[float32], z *transformer.Frozen[float32], hidden []float32, prompt []int, k int, last *[]float32) ([]*float64, [][]TokenLogprob, error) {
	P := len(prompt)
	lps := make([]*float64, P)
	var top [][]TokenLogprob
	if k > 0 {
		top = make([][]TokenLogprob, P)
	}
	var mu sync.Mutex
	var bad error
	m.Logits(z, hidden, P, nil, func(t int, row []float32) {
		if t == P-1 {
			*last = append([]float32(nil), row...)
			return
		}
		if err := checkRow(row); err != nil {
			mu.Lock()
			bad = fmt.Errorf("prompt position %d: %w", t, err)
			mu.Unlock()
			return
		}
		lse := ops.LogSumExp(row)
		lp := float64(row[prompt[t+1]]) - lse
		lps[t+1] = &lp
		if k > 0 {
			top[t+1] = topK(row, k, lse)
		}
	})
	return lps, top, bad
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
	lps, _, err := promptLogprobs(m, z, hidden, input, 0, &last)
	if err != nil {
		return nil, err
	}
	return lps, nil
}

func newSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
