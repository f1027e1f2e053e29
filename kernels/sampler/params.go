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

// RangeError is a sampling parameter outside the API's range. Field names
// it as the request body does, relative to the payload
// ("parameters.top_p").
type RangeError struct {
	Field  string
	Reason string
}

func (e *RangeError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes a RangeError an ErrSampleParams.
func (e *RangeError) Unwrap() error { return kerr.ErrSampleParams }

// checkRanges is the one home of the parameters' ranges: the API's schema
// check and the engine's both read it.
func (p Params) checkRanges() *RangeError {
	switch {
	case p.MaxTokens < 1 || p.MaxTokens > MaxNewTokens:
		return &RangeError{"parameters.max_tokens", fmt.Sprintf("must be 1 to %d", MaxNewTokens)}
	case math.IsNaN(p.Temperature) || p.Temperature < 0 || p.Temperature > 2:
		return &RangeError{"parameters.temperature", "must be 0 to 2"}
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return &RangeError{"parameters.top_p", "must be 0 to 1"}
	case p.TopK < -1:
		return &RangeError{"parameters.top_k", "must be >= -1"}
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return &RangeError{"parameters.min_p", "must be 0 to 1"}
	case len(p.StopTokenIDs) > MaxStopTokens:
		return &RangeError{"parameters.stop_token_ids", fmt.Sprintf("must have at most %d items", MaxStopTokens)}
	}
	for i, t := range p.StopTokenIDs {
		if t < 0 {
			return &RangeError{fmt.Sprintf("parameters.stop_token_ids[%d]", i), "must be >= 0"}
		}
	}
	return nil
}

// Validate checks the parameters against the API's ranges and the model.
func (p Params) Validate(vocab int) error {
	if err := p.checkRanges(); err != nil {
		return err
	}
	for _, t := range p.StopTokenIDs {
		if t >= vocab {
			return fmt.Errorf("%w: stop token %d, vocabulary [0, %d)", kerr.ErrTokenRange, t, vocab)
		}
	}
	return nil
}
