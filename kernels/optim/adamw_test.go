package optim

import (
	"errors"
	"math"
	"testing"
)

// A hand-computed first step: with bias correction, AdamW's first update is
// lr·sign(g) (up to eps) whatever the gradient's size.
func TestFirstStepIsSignTimesLR(t *testing.T) {
	s := NewState([]int{3})
	w := []float32{1, 2, 3}
	g := []float32{0.5, -1e-3, 40}
	p := Defaults()
	p.LR = 0.01
	m, err := s.Update([][]float32{w}, [][]float32{g}, p)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.99, 2.01, 2.99}
	for i := range w {
		if math.Abs(float64(w[i])-want[i]) > 1e-6 {
			t.Fatalf("w[%d] = %v want %v", i, w[i], want[i])
		}
	}
	if m.Step != 1 || math.Abs(m.GradNorm-math.Sqrt(0.25+1e-6+1600)) > 1e-9 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestWeightDecayDecoupled(t *testing.T) {
	s := NewState([]int{1})
	w := []float32{2}
	p := Params{LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.5}
	s.Update([][]float32{w}, [][]float32{{0}}, p)
	// Zero gradient: only the decay acts, w·(1 − lr·wd).
	if math.Abs(float64(w[0])-2*(1-0.05)) > 1e-6 {
		t.Fatalf("w = %v", w[0])
	}
}

func TestClipping(t *testing.T) {
	s := NewState([]int{2})
	g := []float32{3, 4}
	p := Defaults()
	p.GradClipNorm = 1
	m, _ := s.Update([][]float32{{0, 0}}, [][]float32{g}, p)
	if !m.Clipped || m.GradNorm != 5 {
		t.Fatalf("%+v", m)
	}
	if math.Abs(float64(s.M[0][0])-0.1*3/5) > 1e-6 {
		t.Fatalf("moment %v: clipped gradient not used", s.M[0][0])
	}
}

func TestNonFiniteRefused(t *testing.T) {
	s := NewState([]int{2})
	w := []float32{1, 1}
	if _, err := s.Update([][]float32{w}, [][]float32{{float32(math.NaN()), 1}}, Defaults()); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("err %v", err)
	}
	if w[0] != 1 || w[1] != 1 || s.Step != 0 || s.M[0][1] != 0 {
		t.Fatal("a refused step changed state")
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{LR: -1, Beta1: 0.9, Beta2: 0.9, Eps: 1}, {LR: 1, Beta1: 1, Beta2: 0.9, Eps: 1},
		{LR: 1, Beta1: 0.9, Beta2: 0.9, Eps: 0}, {LR: math.NaN(), Beta1: 0.9, Beta2: 0.9, Eps: 1}} {
		if p.Validate() == nil {
			t.Fatalf("%+v accepted", p)
		}
	}
	if Defaults().Validate() != nil {
		t.Fatal("defaults rejected")
	}
}

// Update only reads the gradient, clipped or not: the trainer relies on it to
// keep its accumulator intact when a step is refused.
func TestGradientsNotMutated(t *testing.T) {
	s := NewState([]int{2})
	g := []float32{30, 40}
	p := Defaults()
	p.GradClipNorm = 1
	if _, err := s.Update([][]float32{{0, 0}}, [][]float32{g}, p); err != nil {
		t.Fatal(err)
	}
	if g[0] != 30 || g[1] != 40 {
		t.Fatalf("gradient changed to %v", g)
	}
}
