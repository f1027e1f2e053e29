package ops

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/wts-project/wts/kernels/model"
)

// InvFreq returns RoPE's inverse frequencies [hd/2] for a config, with the
// Llama-3 or linear rope_scaling applied. It follows transformers' float32
// arithmetic (base^(2i/d) in float32) so positions line up with PyTorch.
func InvFreq(c model.Config) []float64 {
	half := c.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		exp := float32(2*i) / float32(c.HeadDim)
		inv[i] = float64(float32(1 / math.Pow(c.RopeTheta, float64(exp))))
	}
	rs := c.RopeScaling
	if rs == nil {
		return inv
	}
	switch rs.Type {
	case "linear":
		for i := range inv {
			inv[i] = float64(float32(inv[i] / rs.Factor))
		}
	case "llama3":
		old := float64(rs.OriginalMaxPosition)
		lowWave := old / rs.LowFreqFactor
		highWave := old / rs.HighFreqFactor
		for i, f := range inv {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave: // high frequencies are kept
			case wave > lowWave: // low frequencies are slowed by the factor
				inv[i] = f / rs.Factor
			default: // in between, a smooth blend of the two
				smooth := (old/wave - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-smooth)*f/rs.Factor + smooth*f
			}
			inv[i] = float64(float32(inv[i]))
		}
	}
	return inv
}

// RopeTable holds cos and sin of position·freq for a run of positions.
// cos, sin: [T, hd/2].
type RopeTable[F Float] struct {
	Cos, Sin []F
	Half     int
}

// NewRopeTable computes the table for the given absolute positions, with the
// angle rounded to float32 as transformers computes it.
func NewRopeTable[F Float](invFreq []float64, positions []int) *RopeTable[F] {
	half := len(invFreq)
	t := &RopeTable[F]{Cos: make([]F, len(positions)*half), Sin: make([]F, len(positions)*half), Half: half}
	for r, p := range positions {
		for i, f := range invFreq {
			ang := float64(float32(p) * float32(f))
			t.Cos[r*half+i] = F(math.Cos(ang))
			t.Sin[r*half+i] = F(math.Sin(ang))
		}
	}
	return t
}

// Rope is one model's rotary angles: the table of positions 0..n−1,
// computed once as far as any sequence has reached, from which a batch's
// table is cut or copied. Computing a sine and a cosine per position and
// frequency for every batch was ~2–3% of a tiny model's 16-token forward.
// Safe for concurrent use.
type Rope[F Float] struct {
	invFreq []float64
	mu      sync.Mutex                   // held while the table grows
	rows    atomic.Pointer[RopeTable[F]] // positions 0..n−1
}

// NewRope returns the angles of inverse frequencies invFreq (InvFreq).
func NewRope[F Float](invFreq []float64) *Rope[F] { return &Rope[F]{invFreq: invFreq} }

// Table returns the table for the given absolute positions (it may share
// the model's rows: only read it).
func (r *Rope[F]) Table(positions []int) *RopeTable[F] {
	half := len(r.invFreq)
	top, run := 0, true // run: positions[0], positions[0]+1, ...
	for i, p := range positions {
		top = max(top, p+1)
		run = run && p == positions[0]+i
	}
	all := r.upTo(top)
	if run && len(positions) > 0 {
		lo, hi := positions[0]*half, (positions[0]+len(positions))*half
		return &RopeTable[F]{Cos: all.Cos[lo:hi], Sin: all.Sin[lo:hi], Half: half}
	}
	t := &RopeTable[F]{Cos: make([]F, len(positions)*half), Sin: make([]F, len(positions)*half), Half: half}
	for i, p := range positions {
		copy(t.Cos[i*half:(i+1)*half], all.Cos[p*half:(p+1)*half])
		copy(t.Sin[i*half:(i+1)*half], all.Sin[p*half:(p+1)*half])
	}
	return t
}

// upTo returns rows covering positions 0..n−1, growing them (at least
// doubling) when they fall short.
func (r *Rope[F]) upTo(n int) *RopeTable[F] {
	half := len(r.invFreq)
	if t := r.rows.Load(); t != nil && len(t.Cos) >= n*half {
		return t
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.rows.Load()
	if t != nil && len(t.Cos) >= n*half {
		return t
	}
	size := max(n, 64)
	if t != nil && half > 0 {
		size = max(size, 2*len(t.Cos)/half)
	}
	positions := make([]int, size)
	for i := range positions {
		positions[i] = i
	}
	t = NewRopeTable[F](r.invFreq, positions)
	r.rows.Store(t)
	return t
}

// Rope rotates each head of x in place, rotate-half layout: the pair
// (x[i], x[i+hd/2]) turns by the angle of frequency i. x: [T, H*hd].
func (rt *RopeTable[F]) Rope(x []F, T, H int) { rt.rotate(x, T, H, 1) }

// RopeBackward applies the inverse rotation to a gradient in place.
func (rt *RopeTable[F]) RopeBackward(dx []F, T, H int) { rt.rotate(dx, T, H, -1) }

// RopeRow rotates heads (any whole number of them, [n, hd]) of table row
// t's token in place: a decode step ropes each sequence's heads where it
// attends them, on whichever core that is.
func (rt *RopeTable[F]) RopeRow(heads []F, t int) { rt.rotateRow(heads, t, 1) }

func (rt *RopeTable[F]) rotate(x []F, T, H int, dir F) {
	w := H * 2 * rt.Half
	for t := 0; t < T; t++ {
		rt.rotateRow(x[t*w:(t+1)*w], t, dir)
	}
}

func (rt *RopeTable[F]) rotateRow(heads []F, t int, dir F) {
	half := rt.Half
	hd := 2 * half
	c, s := rt.Cos[t*half:(t+1)*half], rt.Sin[t*half:(t+1)*half]
	for h := 0; h+hd <= len(heads); h += hd {
		v := heads[h : h+hd]
		for i := 0; i < half; i++ {
			x1, x2 := v[i], v[i+half]
			si := dir * s[i]
			v[i] = x1*c[i] - x2*si
			v[i+half] = x2*c[i] + x1*si
		}
	}
}
