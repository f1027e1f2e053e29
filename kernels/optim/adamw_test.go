package optim

import (
	"encoding/binary"
	"errors"
	"fmt"
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

// A learning rate that makes a finite gradient's step overflow (1e308 was
// accepted and left NaN weights behind a succeeded step) is refused, and
// the parameters, moments and step count stay as they were.
func TestOverflowingStepRefused(t *testing.T) {
	s := NewState([]int{3})
	w := []float32{1, -2, 3}
	p := Defaults()
	if _, err := s.Update([][]float32{w}, [][]float32{{0.1, 0.2, 0.3}}, p); err != nil {
		t.Fatal(err)
	}
	before, wBefore := s.Clone(), append([]float32(nil), w...)
	p.LR = 1e308
	if _, err := s.Update([][]float32{w}, [][]float32{{0.1, 0.2, 0.3}}, p); !errors.Is(err, ErrNonFinite) {
		t.Fatalf("err %v, want ErrNonFinite", err)
	}
	if s.Step != before.Step || fmt.Sprint(s.M, s.V, w) != fmt.Sprint(before.M, before.V, wBefore) {
		t.Fatalf("a refused step changed the state: %v %v %v", s.M, s.V, w)
	}
}

// FuzzUpdate steps arbitrary parameters and gradients under arbitrary
// hyperparameters: it never panics; a step either leaves everything finite
// or is refused and leaves everything as it was.
//
//	go test ./kernels/optim -fuzz FuzzUpdate
func FuzzUpdate(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, []byte{0, 0, 128, 63, 0, 0, 0, 192}, 1e308, 0.9, 0.95, 1e-12, 0.0, 0.0)
	f.Add([]byte{0, 0, 128, 127}, []byte{0, 0, 128, 127}, 1e-4, 0.0, 0.0, 1e-300, 1e10, 1.0)
	f.Fuzz(func(t *testing.T, wb, gb []byte, lr, b1, b2, eps, wd, clip float64) {
		n := min(len(wb), len(gb)) / 4
		w, g := make([]float32, n), make([]float32, n)
		for i := range n {
			w[i] = math.Float32frombits(binary.LittleEndian.Uint32(wb[4*i:]))
			g[i] = math.Float32frombits(binary.LittleEndian.Uint32(gb[4*i:]))
		}
		for _, v := range w {
			if !finite(v) {
				return // the trainer's parameters are finite by this very rule
			}
		}
		s := NewState([]int{n})
		before := append([]float32(nil), w...)
		_, err := s.Update([][]float32{w}, [][]float32{g}, Params{LR: lr, Beta1: b1, Beta2: b2, Eps: eps, WeightDecay: wd, GradClipNorm: clip})
		if err != nil {
			if s.Step != 0 || fmt.Sprint(w) != fmt.Sprint(before) {
				t.Fatalf("a refused step changed the state: %v", err)
			}
			return
		}
		for i := range w {
			if !finite(w[i]) || !finite(s.M[0][i]) || !finite(s.V[0][i]) {
				t.Fatalf("a step left value %d non-finite: w %v m %v v %v", i, w[i], s.M[0][i], s.V[0][i])
			}
		}
	})
}
