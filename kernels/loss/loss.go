// Package loss defines the per-token training objectives, matching Tinker's
// built-in losses. Every loss is a sum over tokens of a function of that
// token's log-probability logp under the model being trained, so each token's
// value and gradient dL/dlogp are computed on their own, in float64.
package loss

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/wts-project/wts/kernels/kerr"
)

// Inputs are one datum's loss inputs, aligned with its model input: position
// i of each slice belongs to the prediction made at input position i.
type Inputs struct {
	TargetTokens []int
	Weights      []float64 // cross_entropy: per-token weight (default 1)
	Logprobs     []float64 // RL losses: the sampler's logprob of each target
	Advantages   []float64 // RL losses
}

// Fn is a configured loss.
type Fn struct {
	Name string
	// Token returns the loss contribution of token i of a datum with inputs
	// in, and its derivative with respect to logp.
	Token func(in *Inputs, i int, logp float64) (loss, dlogp float64)
	// requires lists the inputs beyond target_tokens that must be present;
	// allows those that may be.
	requires, allows []string
	config           map[string]float64
}

// ErrUnknown marks an unknown loss name or config key; ErrInputs marks loss
// inputs that are missing, extra, misaligned or not finite.
var (
	ErrUnknown = kerr.ErrUnknownLoss
	ErrInputs  = kerr.ErrLossInputs
)

// The PPO and CISPO ratio bounds Tinker uses when none are given.
const (
	DefaultClipLow  = 0.8
	DefaultClipHigh = 1.2
	DefaultDROBeta  = 0.05
)

// Names lists the losses.
func Names() []string {
	return []string{"cross_entropy", "importance_sampling", "ppo", "cispo", "dro"}
}

// New configures loss name with config (nil for defaults). Config keys are
// clip_low_threshold and clip_high_threshold (ppo, cispo) and beta (dro).
func New(name string, config map[string]float64) (*Fn, error) {
	get := func(key string, def float64) float64 {
		if v, ok := config[key]; ok {
			return v
		}
		return def
	}
	var f *Fn
	switch name {
	case "cross_entropy":
		f = &Fn{allows: []string{"weights"}, Token: func(in *Inputs, i int, logp float64) (float64, float64) {
			w := 1.0
			if in.Weights != nil {
				w = in.Weights[i]
			}
			return -w * logp, -w
		}}
	case "importance_sampling":
		f = &Fn{requires: []string{"logprobs", "advantages"}, Token: func(in *Inputs, i int, logp float64) (float64, float64) {
			ratio := math.Exp(logp - in.Logprobs[i])
			a := in.Advantages[i]
			return -ratio * a, -ratio * a
		}}
	case "ppo":
		lo, hi := get("clip_low_threshold", DefaultClipLow), get("clip_high_threshold", DefaultClipHigh)
		f = &Fn{requires: []string{"logprobs", "advantages"}, config: map[string]float64{"clip_low_threshold": lo, "clip_high_threshold": hi},
			Token: func(in *Inputs, i int, logp float64) (float64, float64) {
				ratio := math.Exp(logp - in.Logprobs[i])
				a := in.Advantages[i]
				clipped := min(max(ratio, lo), hi)
				// min(ratio·A, clip(ratio)·A): the unclipped branch carries the
				// gradient when it is the smaller or the ratio is inside the
				// bounds; the clipped branch is constant in logp.
				if ratio*a <= clipped*a {
					return -ratio * a, -ratio * a
				}
				return -clipped * a, 0
			}}
	case "cispo":
		lo, hi := get("clip_low_threshold", DefaultClipLow), get("clip_high_threshold", DefaultClipHigh)
		f = &Fn{requires: []string{"logprobs", "advantages"}, config: map[string]float64{"clip_low_threshold": lo, "clip_high_threshold": hi},
			Token: func(in *Inputs, i int, logp float64) (float64, float64) {
				// The clipped ratio is a constant weight (detached) on logp·A.
				w := min(max(math.Exp(logp-in.Logprobs[i]), lo), hi)
				a := in.Advantages[i]
				return -w * logp * a, -w * a
			}}
	case "dro":
		beta := get("beta", DefaultDROBeta)
		f = &Fn{requires: []string{"logprobs", "advantages"}, config: map[string]float64{"beta": beta},
			Token: func(in *Inputs, i int, logp float64) (float64, float64) {
				d := logp - in.Logprobs[i]
				a := in.Advantages[i]
				return -(logp*a - 0.5*beta*d*d), -(a - beta*d)
			}}
	default:
		return nil, fmt.Errorf("%w %q (have %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	f.Name = name
	for k, v := range config {
		if _, ok := f.config[k]; !ok {
			return nil, fmt.Errorf("%w: loss %s takes no config key %q", ErrUnknown, name, k)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: loss config %s is not finite", ErrInputs, k)
		}
	}
	if lo, hi := f.config["clip_low_threshold"], f.config["clip_high_threshold"]; f.config != nil && name != "dro" && !(0 <= lo && lo <= 1 && hi >= 1) {
		return nil, fmt.Errorf("%w: clip thresholds must satisfy 0 <= clip_low_threshold <= 1 <= clip_high_threshold", ErrInputs)
	}
	return f, nil
}

// Check validates a datum's inputs for this loss: required ones present,
// nothing unexpected, every slice as long as the model input, all finite.
func (f *Fn) Check(in *Inputs, n int) error {
	present := map[string]int{}
	if in.TargetTokens != nil {
		present["target_tokens"] = len(in.TargetTokens)
	}
	if in.Weights != nil {
		present["weights"] = len(in.Weights)
	}
	if in.Logprobs != nil {
		present["logprobs"] = len(in.Logprobs)
	}
	if in.Advantages != nil {
		present["advantages"] = len(in.Advantages)
	}
	if _, ok := present["target_tokens"]; !ok {
		return fmt.Errorf("%w: target_tokens is required", ErrInputs)
	}
	for _, r := range f.requires {
		if _, ok := present[r]; !ok {
			return fmt.Errorf("%w: loss %s requires %s", ErrInputs, f.Name, r)
		}
	}
	allowed := map[string]bool{"target_tokens": true}
	for _, k := range append(f.requires, f.allows...) {
		allowed[k] = true
	}
	keys := make([]string, 0, len(present))
	for k := range present {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !allowed[k] {
			return fmt.Errorf("%w: loss %s does not take %s", ErrInputs, f.Name, k)
		}
		if present[k] != n {
			return fmt.Errorf("%w: %s has %d entries but the model input has %d tokens", ErrInputs, k, present[k], n)
		}
	}
	for _, s := range [][]float64{in.Weights, in.Logprobs, in.Advantages} {
		for _, v := range s {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: loss inputs must be finite", ErrInputs)
			}
		}
	}
	return nil
}
