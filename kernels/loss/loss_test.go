package loss

import (
	"errors"
	"math"
	"testing"
)

func inputs() *Inputs {
	return &Inputs{TargetTokens: []int{1, 2, 3, 4}, Weights: []float64{1, 0.5, 0, 2},
		Logprobs: []float64{-1, -2, -0.5, -3}, Advantages: []float64{1, -1, 0.5, -2}}
}

// dlogp is the derivative of each loss in logp (CISPO excepted: its weight is
// detached, checked below).
func TestDerivatives(t *testing.T) {
	in := inputs()
	for _, name := range []string{"cross_entropy", "importance_sampling", "ppo", "dro"} {
		fn, _ := New(name, nil)
		for i := range in.TargetTokens {
			for _, off := range []float64{-0.7, -0.1, 0.05, 0.4} { // ratios inside and outside PPO's bounds
				lp := in.Logprobs[i] + off
				_, d := fn.Token(in, i, lp)
				lhi, _ := fn.Token(in, i, lp+1e-6)
				llo, _ := fn.Token(in, i, lp-1e-6)
				if num := (lhi - llo) / 2e-6; math.Abs(num-d) > 1e-6*(1+math.Abs(num)) {
					t.Fatalf("%s token %d offset %v: d %v numeric %v", name, i, off, d, num)
				}
			}
		}
	}
}

func TestPPOClipping(t *testing.T) {
	fn, _ := New("ppo", nil)
	in := &Inputs{TargetTokens: []int{0}, Logprobs: []float64{0}, Advantages: []float64{1}}
	// ratio e^0.5 > 1.2 with A > 0: clipped objective, no gradient.
	l, d := fn.Token(in, 0, 0.5)
	if d != 0 || math.Abs(l+1.2) > 1e-12 {
		t.Fatalf("clipped: loss %v d %v", l, d)
	}
	// ratio e^-0.5 < 0.8 with A > 0: the unclipped term is smaller, so it counts.
	if _, d := fn.Token(in, 0, -0.5); math.Abs(d+math.Exp(-0.5)) > 1e-12 {
		t.Fatalf("unclipped below: d %v", d)
	}
}

func TestCISPO(t *testing.T) {
	fn, _ := New("cispo", map[string]float64{"clip_high_threshold": 1.1})
	in := &Inputs{TargetTokens: []int{0}, Logprobs: []float64{-1}, Advantages: []float64{2}}
	l, d := fn.Token(in, 0, -0.5) // ratio e^0.5 clipped to 1.1
	if math.Abs(d+1.1*2) > 1e-12 || math.Abs(l-1.1*0.5*2) > 1e-12 {
		t.Fatalf("loss %v d %v", l, d)
	}
}

func TestConfigAndChecks(t *testing.T) {
	if _, err := New("ppo", map[string]float64{"beta": 1}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := New("ppo", map[string]float64{"clip_low_threshold": 1.5}); !errors.Is(err, ErrInputs) {
		t.Fatalf("bad threshold: %v", err)
	}
	if _, err := New("nope", nil); !errors.Is(err, ErrUnknown) {
		t.Fatal(err)
	}
	fn, _ := New("importance_sampling", nil)
	in := inputs()
	if err := fn.Check(in, 4); !errors.Is(err, ErrInputs) { // weights not taken
		t.Fatalf("extra input: %v", err)
	}
	in.Weights = nil
	if err := fn.Check(in, 4); err != nil {
		t.Fatal(err)
	}
	if err := fn.Check(in, 5); !errors.Is(err, ErrInputs) {
		t.Fatalf("length: %v", err)
	}
	in.Advantages = nil
	if err := fn.Check(in, 4); !errors.Is(err, ErrInputs) {
		t.Fatalf("missing: %v", err)
	}
}
