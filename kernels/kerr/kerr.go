// Package kerr names the engine's input and numeric failures. Every package
// under kernels/ wraps one of these sentinels, so the service maps an engine
// error to its public error code in one place (Code) with errors.Is.
package kerr

import "errors"

// The engine's error kinds.
var (
	ErrTokenRange   = errors.New("token id outside the vocabulary")
	ErrTooLong      = errors.New("sequence longer than the model's context")
	ErrEmptyInput   = errors.New("empty input")
	ErrLossInputs   = errors.New("bad loss inputs")
	ErrUnknownLoss  = errors.New("unknown loss")
	ErrNonFinite    = errors.New("values are not finite")
	ErrOptimParams  = errors.New("bad optimizer parameters")
	ErrSampleParams = errors.New("bad sampling parameters")
	ErrBadModel     = errors.New("bad model folder")
	ErrBadAdapter   = errors.New("bad adapter")
	ErrBadState     = errors.New("bad training state")
)

var codes = []struct {
	err  error
	code string
}{
	{ErrTokenRange, "token_out_of_range"},
	{ErrTooLong, "sequence_too_long"},
	{ErrEmptyInput, "empty_input"},
	{ErrLossInputs, "invalid_loss_inputs"},
	{ErrUnknownLoss, "unknown_loss"},
	{ErrNonFinite, "non_finite_values"},
	{ErrOptimParams, "invalid_optimizer_params"},
	{ErrSampleParams, "invalid_sampling_params"},
	{ErrBadModel, "invalid_model"},
	{ErrBadAdapter, "invalid_adapter"},
	{ErrBadState, "invalid_state"},
}

// Code returns the stable code for an engine error, or "" for any other
// error (an internal failure, not the caller's input).
func Code(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}
