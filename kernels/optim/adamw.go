// Package optim is AdamW as torch.optim.AdamW computes it (bias-corrected
// moments, weight decay decoupled from the gradient), with optional
// global-norm gradient clipping as torch.nn.utils.clip_grad_norm_ does it.
package optim

import (
	"fmt"
	"math"

	"github.com/wts-project/wts/kernels/kerr"
)

// Params are one step's hyperparameters. A caller may change them between
// steps (learning-rate schedules live with the caller).
type Params struct {
	LR           float64 `msgpack:"lr"`
	Beta1        float64 `msgpack:"beta1"`
	Beta2        float64 `msgpack:"beta2"`
	Eps          float64 `msgpack:"eps"`
	WeightDecay  float64 `msgpack:"weight_decay"`
	GradClipNorm float64 `msgpack:"grad_clip_norm"` // 0: no clipping
}

// Defaults are Tinker's: lr 1e-4, betas 0.9/0.95, eps 1e-12, no decay, no clipping.
func Defaults() Params { return Params{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12} }

// ErrParams marks hyperparameters outside their domain.
var ErrParams = kerr.ErrOptimParams

// Validate checks each hyperparameter's range.
func (p Params) Validate() error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrParams, what) }
	for _, v := range []float64{p.LR, p.Beta1, p.Beta2, p.Eps, p.WeightDecay, p.GradClipNorm} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return bad("values must be finite")
		}
	}
	switch {
	case p.LR < 0:
		return bad("learning_rate must be >= 0")
	case p.Beta1 < 0 || p.Beta1 >= 1:
		return bad("beta1 must be in [0, 1)")
	case p.Beta2 < 0 || p.Beta2 >= 1:
		return bad("beta2 must be in [0, 1)")
	case p.Eps <= 0:
		return bad("eps must be > 0")
	case p.WeightDecay < 0:
		return bad("weight_decay must be >= 0")
	case p.GradClipNorm < 0:
		return bad("grad_clip_norm must be >= 0 (0 disables clipping)")
	}
	return nil
}

// State is the optimiser's memory: first and second moments per parameter
// tensor, and the number of steps taken.
type State struct {
	Step int         `msgpack:"step"`
	M    [][]float32 `msgpack:"m"`
	V    [][]float32 `msgpack:"v"`
}

// NewState allocates zero moments for tensors of the given sizes.
func NewState(sizes []int) *State {
	s := &State{M: make([][]float32, len(sizes)), V: make([][]float32, len(sizes))}
	for i, n := range sizes {
		s.M[i], s.V[i] = make([]float32, n), make([]float32, n)
	}
	return s
}

// Clone deep-copies the state.
func (s *State) Clone() *State {
	c := &State{Step: s.Step, M: make([][]float32, len(s.M)), V: make([][]float32, len(s.V))}
	for i := range s.M {
		c.M[i] = append([]float32(nil), s.M[i]...)
		c.V[i] = append([]float32(nil), s.V[i]...)
	}
	return c
}

// Metrics describe one step.
type Metrics struct {
	GradNorm float64 // global L2 norm of the gradient before clipping
	Clipped  bool
	LR       float64
	Step     int // the step number just taken, from 1
}

// ErrNonFinite means the gradient held NaN or Inf, or the step would have
// made a parameter or a moment so; nothing was changed.
var ErrNonFinite = kerr.ErrNonFinite

// Update applies one AdamW update to params from grads (same shapes, same
// order as the state). grads are only read: clipping scales each value as it
// is used. On error nothing — parameters, moments, step count — has changed.
func (s *State) Update(params, grads [][]float32, p Params) (Metrics, error) {
	if err := p.Validate(); err != nil {
		return Metrics{}, err
	}
	if len(params) != len(s.M) || len(grads) != len(params) {
		return Metrics{}, fmt.Errorf("optimizer: %d params, %d grads, state for %d", len(params), len(grads), len(s.M))
	}
	var sq float64
	for i, g := range grads {
		if len(g) != len(s.M[i]) || len(params[i]) != len(g) {
			return Metrics{}, fmt.Errorf("optimizer: tensor %d has %d values, state %d", i, len(g), len(s.M[i]))
		}
		for _, v := range g {
			sq += float64(v) * float64(v)
		}
	}
	norm := math.Sqrt(sq)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return Metrics{GradNorm: norm}, ErrNonFinite
	}
	m := Metrics{GradNorm: norm, LR: p.LR, Step: s.Step + 1}
	clip := 1.0
	if p.GradClipNorm > 0 {
		if c := p.GradClipNorm / (norm + 1e-6); c < 1 {
			clip, m.Clipped = c, true
		}
	}
	step := s.Step + 1
	bc1 := 1 - math.Pow(p.Beta1, float64(step))
	u := update{
		p: &p, clip: clip, bc2sqrt: math.Sqrt(1 - math.Pow(p.Beta2, float64(step))),
		stepSize: p.LR / bc1, decay: 1 - p.LR*p.WeightDecay,
	}
	// A first pass computes every new value without storing it: a step
	// whose result is not finite (a huge learning rate on a finite
	// gradient) is refused and changes nothing, as the contract above says.
	for i, w := range params {
		g, mo, ve := grads[i], s.M[i], s.V[i]
		for j := range w {
			if m, v, nw := u.at(w[j], g[j], mo[j], ve[j]); !finite(m) || !finite(v) || !finite(nw) {
				return Metrics{GradNorm: norm, LR: p.LR}, fmt.Errorf("%w: the step would make parameter %d of tensor %d %v (learning_rate %g)", ErrNonFinite, j, i, nw, p.LR)
			}
		}
	}
	s.Step = step
	for i, w := range params {
		g, mo, ve := grads[i], s.M[i], s.V[i]
		for j := range w {
			mo[j], ve[j], w[j] = u.at(w[j], g[j], mo[j], ve[j])
		}
	}
	return m, nil
}

// update is one AdamW step's constants.
type update struct {
	p                              *Params
	clip, bc2sqrt, stepSize, decay float64
}

// at is one parameter's step: its new first and second moments and value
// from its value w, gradient g and moments mo, ve.
func (u *update) at(w, g, mo, ve float32) (float32, float32, float32) {
	gj := float64(g) * u.clip
	m := float32(u.p.Beta1*float64(mo) + (1-u.p.Beta1)*gj)
	v := float32(u.p.Beta2*float64(ve) + (1-u.p.Beta2)*gj*gj)
	denom := math.Sqrt(float64(v))/u.bc2sqrt + u.p.Eps
	return m, v, float32(float64(w)*u.decay - u.stepSize*float64(m)/denom)
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
