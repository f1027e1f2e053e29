package usage

import (
	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/payload"
	"github.com/wts-project/wts/providers"
)

// An operation's estimated cost is an upper bound of what it is billed:
// its tokens at most what its payload can make the model process, and its
// device time at most a generous bound of its work, priced at the
// session's snapshot. Its session's budget holds the estimate while it is
// queued or executing (providers/ledger), and Record never bills it more:
// so a ceiling is never passed, whatever an operation's device time turns
// out to be.
const (
	// boundBaseMS is every operation's device-time allowance before its
	// work: a job's start, a trainer's rebuild, its files.
	boundBaseMS = 5_000
	// boundFLOPPerMS is the slowest throughput the bound assumes (10
	// GFLOP/s, a tenth of the 2-core CPU's), so that the bound holds on any
	// executor this service runs.
	boundFLOPPerMS = 10_000_000
	// boundParamsPerMS is how fast the bound assumes an operation without
	// tokens (optim_step, saves, loads, exports) goes over the model's
	// parameters: 4-byte values at 100 MB/s.
	boundParamsPerMS = 25_000
)

// Estimate is the estimated cost in micro-USD of an operation of kind
// with payload p on a model of params parameters, at prices pr.
func Estimate(pr *Prices, kind string, p payload.Parsed, params int64) int64 {
	tokens, ms := Bound(kind, p, params)
	cost := pr.Billing.Cost(providers.MeterDeviceMS, ms)
	if m := executor.KindOf(kind).Meter; m != "" {
		cost += pr.Billing.Cost(m, tokens)
	}
	return cost
}

// Bound is an upper bound of the tokens an operation of kind with payload
// p is metered for, and of its device time in milliseconds, on a model of
// params parameters.
func Bound(kind string, p payload.Parsed, params int64) (tokens, ms int64) {
	passes := int64(2) // multiply-adds a parameter a token: a forward
	switch p := p.(type) {
	case *payload.Batch:
		for _, d := range p.Data {
			tokens += int64(len(d.ModelInput.TokenIDs))
		}
		if kind == payload.ForwardBackward {
			passes = 6 // the forward and the backward's two products
		}
	case *payload.SamplePayload:
		tokens = int64(len(p.Prompt.TokenIDs)) + int64(*p.NumSamples)*int64(*p.Parameters.MaxTokens)
	case *payload.LogprobsPayload:
		tokens = int64(len(p.Input.TokenIDs))
	default:
		return 0, boundBaseMS + params/boundParamsPerMS
	}
	return tokens, boundBaseMS + passes*params*tokens/boundFLOPPerMS
}
