package sampler

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"

	"github.com/wts-project/wts/kernels/kerr"
	"github.com/wts-project/wts/kernels/ops"
	"github.com/wts-project/wts/kernels/rng"
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

// Sample runs a request on engine e under adapter z (e.Freeze(ad); nil for
// the base model). The prompt is prefilled once; all samples decode
// together, one batched forward pass per generated position.
func Sample(e Engine, z Adapter, q Request) (*Result, error) {
	s, err := Start(e, z, q)
	if err != nil {
		return nil, err
	}
	for !s.Done() {
		if err := Step([]*Stream{s}); err != nil {
			return nil, err
		}
	}
	return s.Result(), s.Err()
}

// Stream is a sample request in flight: its prompt prefilled, its sequences
// decoding one token per Step. Step advances many streams at once, of any
// adapters over one engine, so that requests of several samplers share
// every base product.
type Stream struct {
	e       Engine
	z       Adapter
	params  *Params
	res     *Result
	stop    map[int]bool
	streams []*rng.Source
	caches  []Cache
	active  []int // unfinished samples

	// err is the first draw that failed (a logits row without a
	// distribution): the stream ends there, and Err reports it. Draws of
	// one step run on several goroutines.
	errMu sync.Mutex
	err   error
}

// Start prefills a request's prompt (with its prompt logprobs when asked)
// and draws each sample's first token.
func Start(e Engine, z Adapter, q Request) (*Stream, error) {
	streams, errs := StartMany(e, []Adapter{z}, []Request{q})
	return streams[0], errs[0]
}

// StartMany starts several requests (request i under adapter zs[i]) with
// their prompts prefilled together in one pass. A request that fails its
// checks gets its error and the others start.
func StartMany(e Engine, zs []Adapter, qs []Request) ([]*Stream, []error) {
	c := e.Config()
	streams, errs := make([]*Stream, len(qs)), make([]error, len(qs))
	var ok []int
	var okZ []Adapter
	var roots []Cache
	var prompts [][]int
	var all []bool
	var scores []*promptScores
	for i, q := range qs {
		if errs[i] = q.Validate(c.Vocab, c.MaxPos); errs[i] != nil {
			continue
		}
		ps := newPromptScores(q)
		ok, okZ, scores = append(ok, i), append(okZ, zs[i]), append(scores, ps)
		roots, prompts, all = append(roots, e.NewCache()), append(prompts, q.Prompt), append(all, ps.all)
	}
	if len(ok) == 0 {
		return streams, errs
	}
	err := e.Prefill(okZ, roots, prompts, all, func(k, t int, row []float32) { scores[k].add(t, row) })
	for k, i := range ok {
		if err != nil {
			errs[i] = err
			continue
		}
		if streams[i] = begin(e, zs[i], qs[i], roots[k], scores[k]); streams[i].err != nil {
			errs[i], streams[i] = streams[i].err, nil
		}
	}
	return streams, errs
}

// promptScores gathers a prefilled prompt's logits as they come: the last
// position's row, from which the first new token is drawn, and where all,
// every earlier position's logprob of the prompt's next token (and its top
// k tokens). A row without a distribution (checkRow) is an error: its
// logprobs would be NaN. Rows may come concurrently.
type promptScores struct {
	prompt []int
	all    bool
	k      int
	last   []float32
	lps    []*float64
	top    [][]TokenLogprob

	mu  sync.Mutex
	err error
}

func newPromptScores(q Request) *promptScores {
	ps := &promptScores{prompt: q.Prompt, all: q.IncludePromptLogprobs || q.TopKPromptLogprobs > 0, k: q.TopKPromptLogprobs}
	if ps.all {
		ps.lps = make([]*float64, len(q.Prompt))
		if ps.k > 0 {
			ps.top = make([][]TokenLogprob, len(q.Prompt))
		}
	}
	return ps
}

// add takes position t's logits row.
func (ps *promptScores) add(t int, row []float32) {
	if t == len(ps.prompt)-1 {
		ps.last = append([]float32(nil), row...)
		return
	}
	if err := checkRow(row); err != nil {
		ps.mu.Lock()
		ps.err = cmp.Or(ps.err, fmt.Errorf("prompt position %d: %w", t, err))
		ps.mu.Unlock()
		return
	}
	lse := ops.LogSumExp(row)
	lp := float64(row[ps.prompt[t+1]]) - lse
	ps.lps[t+1] = &lp
	if ps.k > 0 {
		ps.top[t+1] = topK(row, ps.k, lse)
	}
}

// begin makes the stream of a prefilled request: its prompt logprobs when
// asked, each sample's cache and random stream, and its first tokens. A
// stream that could not start has err set.
func begin(e Engine, z Adapter, q Request, root Cache, ps *promptScores) *Stream {
	s := &Stream{e: e, z: z, params: &q.Params, res: &Result{Sequences: make([]Sequence, q.NumSamples)}, stop: map[int]bool{}}
	if s.err = ps.err; s.err != nil {
		return s
	}
	if q.IncludePromptLogprobs {
		s.res.PromptLogprobs = ps.lps
	}
	s.res.TopKPromptLogprobs = ps.top
	seed := newSeed()
	if q.Params.Seed != nil {
		seed = *q.Params.Seed
	}
	for _, t := range q.Params.StopTokenIDs {
		s.stop[t] = true
	}
	s.streams = make([]*rng.Source, q.NumSamples)
	s.caches = make([]Cache, q.NumSamples)
	for i := range s.streams {
		// Sample i's stream depends only on (seed, i): reproducible whatever
		// else is batched with it.
		s.streams[i] = rng.Derive(seed, uint64(i))
		s.caches[i] = root.Fork()
		s.caches[i].Reserve(q.Params.MaxTokens)
	}
	for i := range q.NumSamples {
		s.draw(i, ps.last)
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

// Engine is the engine the stream decodes on.
func (s *Stream) Engine() Engine { return s.e }

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
// (all on the same engine) in one batched pass: the base weights are read
// once for all rows, each adapter's LoRA terms apply to its own rows.
func Step(streams []*Stream) error {
	var zs []Adapter
	var caches []Cache
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
	if err := streams[0].e.Step(zs, caches, feed, func(b int, logits []float32) { rows[b].s.draw(rows[b].i, logits) }); err != nil {
		return err
	}
	for _, s := range streams {
		s.prune()
	}
	return nil
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
func Logprobs(e Engine, z Adapter, input []int) ([]*float64, error) {
	c := e.Config()
	if len(input) == 0 {
		return nil, fmt.Errorf("%w: input has no tokens", kerr.ErrEmptyInput)
	}
	if err := CheckTokens(input, c.Vocab); err != nil {
		return nil, err
	}
	if len(input) > c.MaxPos {
		return nil, fmt.Errorf("%w: %d tokens, context %d", kerr.ErrTooLong, len(input), c.MaxPos)
	}
	ps := newPromptScores(Request{Prompt: input, IncludePromptLogprobs: true})
	if err := e.Prefill([]Adapter{z}, []Cache{e.NewCache()}, [][]int{input}, []bool{true}, func(_, t int, row []float32) { ps.add(t, row) }); err != nil {
		return nil, err
	}
	if ps.err != nil {
		return nil, ps.err
	}
	return ps.lps, nil
}

func newSeed() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
