// Package sampler generates tokens from a base model plus an adapter
// snapshot: KV-cache decoding of several sequences per prompt in one batch,
// with vLLM's sampling semantics, and prompt logprobs.
package sampler

import (
	"fmt"
	"math"

	"github.com/wts-project/wts/kernels/kerr"
)

// Params are the sampling parameters of one request.
type Params struct {
	MaxTokens    int
	Temperature  float64 // 0 is greedy
	TopP         float64 // 1 disables
	TopK         int     // -1 or 0 disables
	MinP         float64 // relative to the top token's probability; 0 disables
	Seed         *uint64 // nil: a fresh random seed per request
	StopTokenIDs []int
}

// Limits from the API contract.
const (
	MaxNewTokens      = 4096
	MaxSamples        = 64
	MaxStopTokens     = 256
	MaxTopKPromptLogp = 100
)

// Validate checks the parameters against the API's ranges and the model.
func (p Params) Validate(vocab int) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", kerr.ErrSampleParams, fmt.Sprintf(format, a...))
	}
	switch {
	case p.MaxTokens < 1 || p.MaxTokens > MaxNewTokens:
		return bad("max_tokens %d is outside 1..%d", p.MaxTokens, MaxNewTokens)
	case math.IsNaN(p.Temperature) || p.Temperature < 0 || p.Temperature > 2:
		return bad("temperature must be in [0, 2]")
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return bad("top_p must be in [0, 1]")
	case p.TopK < -1:
		return bad("top_k must be >= -1")
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return bad("min_p must be in [0, 1]")
	case len(p.StopTokenIDs) > MaxStopTokens:
		return bad("at most %d stop_token_ids", MaxStopTokens)
	}
	for _, t := range p.StopTokenIDs {
		if t < 0 || t >= vocab {
			return fmt.Errorf("%w: stop token %d, vocabulary [0, %d)", kerr.ErrTokenRange, t, vocab)
		}
	}
	return nil
}
