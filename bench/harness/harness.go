// Package harness is the sampling benchmark users run (`wts bench
// sample`): load on a service's sampling API, closed-loop (clients that
// each wait for their answer before the next request) or open-loop
// (Poisson arrivals at a rate, whatever the answers do), with prompt and
// output lengths drawn from ranges and the requests spread over many
// samplers (adapters) on one base model. It records time to first token,
// inter-token latency and end-to-end latency (p50, p90, p99), tokens/s
// and goodput under an SLO, and writes them as JSON, a Markdown table and
// PNG plots it draws itself.
//
// The API answers a sample once it is done (callers poll), so no
// request's first token is seen apart. One request in ProbeEvery is a
// probe of one output token: its latency is the time to first token
// under that load. A request of n tokens gives (its latency − the probes'
// median) / (n − 1) as its inter-token latency.
package harness

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wts-project/wts/http/client"
)

// Range is a length drawn uniformly from [Lo, Hi].
type Range struct{ Lo, Hi int }

// ParseRange reads "N" or "LO-HI".
func ParseRange(s string) (Range, error) {
	lo, hi, found := strings.Cut(s, "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	b := a
	if err == nil && found {
		b, err = strconv.Atoi(strings.TrimSpace(hi))
	}
	if err != nil || a < 1 || b < a {
		return Range{}, fmt.Errorf("length %q: want N or LO-HI with 1 <= LO <= HI", s)
	}
	return Range{a, b}, nil
}

func (r Range) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(r.Lo)
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

func (r Range) draw(rng *rand.Rand) int { return r.Lo + rng.IntN(r.Hi-r.Lo+1) }

// SLO is the service level a request must meet to count as goodput: a
// request of n tokens must end within TTFT + (n−1)·ITL of its submission.
type SLO struct {
	TTFT time.Duration `json:"ttft"`
	ITL  time.Duration `json:"itl"`
}

func (s SLO) met(latency time.Duration, tokens int) bool {
	return latency <= s.TTFT+time.Duration(max(tokens-1, 0))*s.ITL
}

// Loops.
const (
	Closed = "closed" // Levels are concurrent clients
	Open   = "open"   // Levels are arrivals per second
)

// ProbeEvery: one request in ProbeEvery is a one-token probe.
const ProbeEvery = 5

// Config is one benchmark.
type Config struct {
	Model    string        // the base model
	Loop     string        // Closed or Open
	Levels   []float64     // clients (Closed) or requests per second (Open)
	Duration time.Duration // of each level
	Prompt   Range
	Output   Range
	// Adapters is how many samplers (each a run's adapter on the base
	// model) the requests spread over; 0 gives each closed-loop client its
	// own.
	Adapters int
	Rank     int
	SLO      SLO
	Seed     uint64
}

func (c *Config) check(maxSeq int) error {
	if c.Loop != Closed && c.Loop != Open {
		return fmt.Errorf("loop %q: closed or open", c.Loop)
	}
	if len(c.Levels) == 0 || c.Duration <= 0 || c.Rank < 1 {
		return fmt.Errorf("need levels, a duration and a rank")
	}
	for _, l := range c.Levels {
		if l <= 0 || (c.Loop == Closed && l != math.Trunc(l)) {
			return fmt.Errorf("level %v: a closed loop's are whole clients, an open loop's positive rates", l)
		}
	}
	if c.Adapters == 0 && c.Loop == Open {
		return fmt.Errorf("an open loop needs a number of adapters")
	}
	if n := c.Prompt.Hi + c.Output.Hi; n > maxSeq {
		return fmt.Errorf("prompt and output up to %d tokens, the model's context is %d", n, maxSeq)
	}
	return nil
}

// Quantiles are a distribution's p50, p90 and p99 in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
}

func quantiles(sorted []float64) Quantiles {
	return Quantiles{quantile(sorted, 0.5), quantile(sorted, 0.9), quantile(sorted, 0.99)}
}

// quantile is the q-quantile of sorted values (nearest rank), 0 when empty.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[max(0, min(len(sorted)-1, int(math.Ceil(q*float64(len(sorted))))-1))]
}

// Level is what one load level measured.
type Level struct {
	Load         float64   `json:"load"` // clients, or requests per second
	Adapters     int       `json:"adapters"`
	Requests     int       `json:"requests"` // answered, probes included
	Errors       int       `json:"errors"`
	Seconds      float64   `json:"seconds"`
	RequestsPerS float64   `json:"requests_per_s"`
	TokensPerS   float64   `json:"tokens_per_s"`  // output tokens
	GoodputPerS  float64   `json:"goodput_per_s"` // requests meeting the SLO, probes aside
	TTFT         Quantiles `json:"ttft"`
	ITL          Quantiles `json:"itl"`
	E2E          Quantiles `json:"e2e"`
	E2ESamples   []float64 `json:"e2e_ms"` // sorted, for the latency CDF
}

// Report is a whole benchmark.
type Report struct {
	Model  string  `json:"model"`
	Loop   string  `json:"loop"`
	Prompt string  `json:"prompt_tokens"`
	Output string  `json:"output_tokens"`
	Rank   int     `json:"lora_rank"`
	SLO    SLO     `json:"slo"`
	Levels []Level `json:"levels"`
	Provenance
	Baseline *Engine `json:"engine_alone,omitempty"`
}

// Run sets up the samplers through c (which should poll often: its
// polling interval bounds the latencies' resolution) and measures each
// level of cfg in turn.
func Run(ctx context.Context, c *client.Client, cfg Config) (*Report, error) {
	m, err := c.Model(ctx, cfg.Model)
	if err != nil {
		return nil, err
	}
	if err := cfg.check(m.MaxSeqLen); err != nil {
		return nil, err
	}
	n := cfg.Adapters
	if n == 0 {
		n = int(slices.Max(cfg.Levels))
	}
	ss, err := samplers(ctx, c, m, n, cfg.Rank)
	defer ss.close(c)
	if err != nil {
		return nil, err
	}
	rep := &Report{Model: m.Name, Loop: cfg.Loop, Prompt: cfg.Prompt.String(), Output: cfg.Output.String(), Rank: cfg.Rank, SLO: cfg.SLO,
		Provenance: Begin()}
	for i, load := range cfg.Levels {
		l := &level{cfg: &cfg, vocab: m.VocabSize, ss: ss.clients, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		if cfg.Adapters == 0 {
			l.ss = ss.clients[:int(load)]
		}
		rep.Levels = append(rep.Levels, l.run(ctx, load))
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// pool is the benchmark's samplers and the sessions that hold them.
type pool struct {
	clients  []*client.SamplingClient
	sessions []string
	stop     context.CancelFunc // the sessions' heartbeats
}

// samplers opens n sessions, each with a run of a rank-r adapter on m
// whose weights are saved for its sampler.
func samplers(ctx context.Context, c *client.Client, m *client.Model, n, rank int) (*pool, error) {
	hb, stop := context.WithCancel(context.Background())
	p := &pool{stop: stop}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		s, err := c.CreateSession(ctx, client.SessionOptions{RequestID: fmt.Sprintf("bench-%s-%d", tag, i), IdleTTLSeconds: 3600})
		if err != nil {
			return p, fmt.Errorf("session %d: %w", i, err)
		}
		p.sessions = append(p.sessions, s.ID)
		go c.KeepAlive(hb, s.ID, time.Minute)
		tc, err := c.CreateLoRATrainingClient(ctx, s.ID, client.TrainingOptions{RequestID: "run", BaseModel: m.Name, ModelRevision: m.Revision,
			LoRA: client.LoRA{Rank: rank, Seed: int64(i)}})
		if err != nil {
			return p, fmt.Errorf("run %d: %w", i, err)
		}
		f, err := tc.SaveWeightsForSampler(ctx)
		if err == nil {
			_, err = f.Result(ctx)
		}
		if err != nil {
			return p, fmt.Errorf("sampler weights %d: %w", i, err)
		}
		sc, err := tc.SamplingClient(ctx)
		if err != nil {
			return p, fmt.Errorf("sampler %d: %w", i, err)
		}
		p.clients = append(p.clients, sc)
	}
	return p, nil
}

// close ends the sessions, which gives back what they reserved.
func (p *pool) close(c *client.Client) {
	p.stop()
	for _, id := range p.sessions {
		c.CloseSession(context.Background(), id)
	}
}

// level is one load level being measured.
type level struct {
	cfg   *Config
	vocab int
	ss    []*client.SamplingClient
	mu    sync.Mutex
	rng   *rand.Rand // under mu
	count int        // requests issued, under mu
	done  []outcome  // under mu
}

// outcome is one answered request.
type outcome struct {
	probe   bool
	tokens  int
	latency time.Duration
	err     bool
	end     time.Time
}

// next draws the next request: its sampler, prompt and output length, and
// whether it is a probe.
func (l *level) next() (*client.SamplingClient, client.SampleRequest, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.count
	l.count++
	prompt := make([]int, l.cfg.Prompt.draw(l.rng))
	for j := range prompt {
		prompt[j] = 3 + l.rng.IntN(l.vocab-3) // past the usual special ids
	}
	probe := i%ProbeEvery == ProbeEvery-1
	out := 1
	if !probe {
		out = l.cfg.Output.draw(l.rng)
	}
	// Greedy, no stop tokens: each request makes exactly its max_tokens.
	return l.ss[i%len(l.ss)], client.SampleRequest{Prompt: client.ModelInput{TokenIDs: prompt}, NumSamples: 1,
		Parameters: client.SamplingParams{MaxTokens: out, Temperature: 0, TopP: 1, TopK: -1}}, probe
}

// one makes a request and records how it went.
func (l *level) one(ctx context.Context) {
	s, req, probe := l.next()
	t0 := time.Now()
	o := outcome{probe: probe}
	f, err := s.Sample(ctx, req)
	var res client.SampleResult
	if err == nil {
		res, err = f.Result(ctx)
	}
	o.latency, o.end = time.Since(t0), time.Now()
	if o.err = err != nil; !o.err {
		for _, seq := range res.Sequences {
			o.tokens += len(seq.Tokens)
		}
	}
	l.mu.Lock()
	l.done = append(l.done, o)
	l.mu.Unlock()
}

// run puts the level's load on the service for the configured duration
// and sums up what came back.
func (l *level) run(ctx context.Context, load float64) Level {
	start := time.Now()
	deadline := start.Add(l.cfg.Duration)
	var wg sync.WaitGroup
	if l.cfg.Loop == Closed {
		for range int(load) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					l.one(ctx)
				}
			}()
		}
	} else {
		arrivals := rand.New(rand.NewPCG(l.cfg.Seed, math.Float64bits(load)))
		for at := start; at.Before(deadline) && ctx.Err() == nil; at = at.Add(time.Duration(arrivals.ExpFloat64() / load * float64(time.Second))) {
			time.Sleep(time.Until(at))
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.one(ctx)
			}()
		}
	}
	wg.Wait()
	return l.sum(load, start)
}

// sum is the level's figures from its outcomes.
func (l *level) sum(load float64, start time.Time) Level {
	out := Level{Load: load, Adapters: len(l.ss)}
	var ttft, e2e []float64
	end := start
	tokens, good := 0, 0
	for _, o := range l.done {
		if o.err {
			out.Errors++
			continue
		}
		out.Requests++
		tokens += o.tokens
		if o.end.After(end) {
			end = o.end
		}
		lat := ms(o.latency)
		if o.probe {
			ttft = append(ttft, lat)
			continue
		}
		e2e = append(e2e, lat)
		if l.cfg.SLO.met(o.latency, o.tokens) {
			good++
		}
	}
	slices.Sort(ttft)
	slices.Sort(e2e)
	first := quantile(ttft, 0.5)
	var itl []float64
	for _, o := range l.done {
		if !o.err && !o.probe && o.tokens > 1 {
			itl = append(itl, max(0, ms(o.latency)-first)/float64(o.tokens-1))
		}
	}
	slices.Sort(itl)
	out.Seconds = end.Sub(start).Seconds()
	if out.Seconds > 0 {
		out.RequestsPerS = float64(out.Requests) / out.Seconds
		out.TokensPerS = float64(tokens) / out.Seconds
		out.GoodputPerS = float64(good) / out.Seconds
	}
	out.TTFT, out.ITL, out.E2E, out.E2ESamples = quantiles(ttft), quantiles(itl), quantiles(e2e), e2e
	return out
}
