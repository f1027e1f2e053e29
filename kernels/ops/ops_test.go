package ops

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/rng"
)

func rand64(r *rng.Source, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = r.Uniform(-1, 1)
	}
	return s
}

func to32(s []float64) []float32 {
	o := make([]float32, len(s))
	for i, v := range s {
		o[i] = float32(v)
	}
	return o
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// fdCheck compares an analytic gradient of L(x) = Σ c⊙f(x) with central
// differences in float64.
func fdCheck(t *testing.T, what string, x []float64, f func([]float64) []float64, c, grad []float64) {
	t.Helper()
	const h = 1e-6
	for i := range x {
		old := x[i]
		x[i] = old + h
		lp := dotf(c, f(x))
		x[i] = old - h
		lm := dotf(c, f(x))
		x[i] = old
		num := (lp - lm) / (2 * h)
		if math.Abs(num-grad[i]) > 1e-6*(1+math.Abs(num)) {
			t.Fatalf("%s: d/dx[%d] analytic %v, numeric %v", what, i, grad[i], num)
		}
	}
}

func dotf(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func TestRMSNorm(t *testing.T) {
	r := rng.New(1)
	// Widths with and without a tail after the vector passes' multiples of 8.
	for _, D := range []int{5, 24, 29, 512} {
		T := 5
		x, w := rand64(r, T*D), rand64(r, D)
		want := RefRMSNorm(x, w, T, D, 1e-5)
		y, inv := make([]float32, T*D), make([]float32, T)
		RMSNorm(y, inv, to32(x), to32(w), T, D, 1e-5)
		closeTo(t, fmt.Sprintf("rmsnorm D=%d", D), y, want, 1e-5)
	}
	T, D := 5, 24
	x, w := rand64(r, T*D), rand64(r, D)

	f := func(x []float64) []float64 {
		y, inv := make([]float64, T*D), make([]float64, T)
		RMSNorm(y, inv, x, w, T, D, 1e-5)
		return y
	}
	c := rand64(r, T*D)
	y64, inv64 := make([]float64, T*D), make([]float64, T)
	RMSNorm(y64, inv64, x, w, T, D, 1e-5)
	dx := make([]float64, T*D)
	RMSNormBackward(dx, c, x, w, inv64, T, D)
	fdCheck(t, "rmsnorm", x, f, c, dx)
}

func TestAdd(t *testing.T) {
	r := rng.New(4)
	for _, n := range []int{0, 3, 8, 29, 512} {
		a, b := rand64(r, n), rand64(r, n)
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(float32(a[i]) + float32(b[i]))
		}
		got := to32(a)
		Add(got, to32(b))
		closeTo(t, fmt.Sprintf("add n=%d", n), got, want, 0)
	}
}

func TestRope(t *testing.T) {
	r := rng.New(2)
	for _, preset := range []string{"tiny", "tiny-llama3"} {
		cfg := model.Presets[preset]
		T, H, hd := 6, 3, cfg.HeadDim
		pos := []int{0, 1, 2, 17, 100, 511}
		inv := InvFreq(cfg)
		x := rand64(r, T*H*hd)
		want := RefRope(x, pos, inv, H)
		got := to32(x)
		NewRopeTable[float32](inv, pos).Rope(got, T, H)
		closeTo(t, preset+" rope", got, want, 1e-4)

		tab := NewRopeTable[float64](inv, pos)
		c := rand64(r, T*H*hd)
		dx := append([]float64(nil), c...)
		tab.RopeBackward(dx, T, H)
		fdCheck(t, "rope", x, func(x []float64) []float64 {
			y := append([]float64(nil), x...)
			tab.Rope(y, T, H)
			return y
		}, c, dx)
	}
}

// A model's Rope hands out the same tables NewRopeTable computes: runs of
// positions (cut from its rows), scattered ones (copied), ones past what it
// holds (it grows), from several goroutines at once.
func TestRopeTables(t *testing.T) {
	inv := InvFreq(model.Presets["tiny-llama3"])
	rope := NewRope[float32](inv)
	cases := [][]int{{0, 1, 2, 3}, {5, 6, 7}, {3, 0, 9, 1}, {63}, {64, 65}, {0, 1000, 4}, {2000, 2001}, {}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, pos := range cases {
				got, want := rope.Table(pos), NewRopeTable[float32](inv, pos)
				if !slices.Equal(got.Cos, want.Cos) || !slices.Equal(got.Sin, want.Sin) || got.Half != want.Half {
					t.Errorf("positions %v: the model's table differs from a fresh one", pos)
				}
			}
		}()
	}
	wg.Wait()
}

// The Llama-3 frequency rule: high frequencies unchanged, low ones divided by
// the factor, a blend between.
func TestLlama3InvFreq(t *testing.T) {
	cfg := model.Presets["llama-3.2-1b"]
	scaled := InvFreq(cfg)
	cfg.RopeScaling = nil
	plain := InvFreq(cfg)
	if scaled[0] != plain[0] {
		t.Fatalf("highest frequency changed: %v vs %v", scaled[0], plain[0])
	}
	last := len(plain) - 1
	if math.Abs(scaled[last]-plain[last]/32) > 1e-12 {
		t.Fatalf("lowest frequency %v, want %v", scaled[last], plain[last]/32)
	}
}

func TestAttention(t *testing.T) {
	r := rng.New(3)
	// T over causalBlock: blocks of query rows, each against its own keys.
	for _, c := range []struct{ T, S, Hq, Hkv, hd int }{{1, 1, 1, 1, 4}, {5, 5, 4, 2, 8}, {3, 7, 4, 1, 6}, {9, 9, 2, 2, 16},
		{40, 40, 2, 1, 4}, {37, 50, 2, 2, 4}, {70, 70, 2, 1, 2}} {
		q, k, v := rand64(r, c.T*c.Hq*c.hd), rand64(r, c.S*c.Hkv*c.hd), rand64(r, c.S*c.Hkv*c.hd)
		want := RefAttention(q, k, v, c.T, c.S, c.Hq, c.Hkv, c.hd)
		out, lse := make([]float32, len(want)), make([]float32, c.Hq*c.T)
		rows := KVLayout{Row: c.Hkv * c.hd, Head: c.hd}
		Attention(out, lse, to32(q), to32(k), to32(v), c.T, c.S, c.Hq, c.Hkv, c.hd, rows)
		closeTo(t, "attention", out, want, 1e-5)
		// The same keys and values head-major, with room for more positions.
		hk, hv, hm := headMajor(k, c.S, c.Hkv, c.hd), headMajor(v, c.S, c.Hkv, c.hd), KVLayout{Row: c.hd, Head: (c.S + 3) * c.hd}
		clear(out)
		Attention(out, lse, to32(q), to32(hk), to32(hv), c.T, c.S, c.Hq, c.Hkv, c.hd, hm)
		closeTo(t, "attention, head-major keys and values", out, want, 1e-5)
		// With no log-sum-exp wanted (a pass no backward follows), the same out.
		with := slices.Clone(out)
		clear(out)
		Attention(out, nil, to32(q), to32(hk), to32(hv), c.T, c.S, c.Hq, c.Hkv, c.hd, hm)
		if !slices.Equal(out, with) {
			t.Fatalf("attention with no log-sum-exp: %v, want %v", out, with)
		}

		// Backward, each input in turn, in float64.
		lse64, out64 := make([]float64, c.Hq*c.T), make([]float64, len(want))
		Attention(out64, lse64, q, k, v, c.T, c.S, c.Hq, c.Hkv, c.hd, KVLayout{Row: c.Hkv * c.hd, Head: c.hd})
		cw := rand64(r, len(want))
		dq, dk, dv := nans(len(q)), nans(len(k)), nans(len(v)) // it must write every element
		AttentionBackward(dq, dk, dv, cw, q, k, v, out64, lse64, c.T, c.S, c.Hq, c.Hkv, c.hd)
		run := func(q, k, v []float64) []float64 { return RefAttention(q, k, v, c.T, c.S, c.Hq, c.Hkv, c.hd) }
		fdCheck(t, "attention dq", q, func(x []float64) []float64 { return run(x, k, v) }, cw, dq)
		fdCheck(t, "attention dk", k, func(x []float64) []float64 { return run(q, x, v) }, cw, dk)
		fdCheck(t, "attention dv", v, func(x []float64) []float64 { return run(q, k, x) }, cw, dv)
	}
}

func FuzzAttention(f *testing.F) {
	f.Add(uint8(3), uint8(2), uint8(4), uint8(1), uint8(8), uint64(1))
	f.Fuzz(func(t *testing.T, T, extra, hq, hkv, hd uint8, seed uint64) {
		c := struct{ T, S, Hq, Hkv, hd int }{int(T%72) + 1, 0, 0, int(hkv%3) + 1, 2 * (int(hd%10) + 1)} // past causalBlock
		c.S = c.T + int(extra%5)
		c.Hq = c.Hkv * (int(hq%3) + 1)
		r := rng.New(seed)
		q, k, v := rand64(r, c.T*c.Hq*c.hd), rand64(r, c.S*c.Hkv*c.hd), rand64(r, c.S*c.Hkv*c.hd)
		want := RefAttention(q, k, v, c.T, c.S, c.Hq, c.Hkv, c.hd)
		out, lse := make([]float32, len(want)), make([]float32, c.Hq*c.T)
		Attention(out, lse, to32(q), to32(k), to32(v), c.T, c.S, c.Hq, c.Hkv, c.hd, KVLayout{Row: c.Hkv * c.hd, Head: c.hd})
		closeTo(t, "attention", out, want, 1e-5)
	})
}

// nans is a buffer of NaN, for outputs that must be written in full.
func nans(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// headMajor copies x [S, H·hd] into [H][S+3][hd] (three positions of
// spare room per head, as a decode cache keeps).
func headMajor(x []float64, S, H, hd int) []float64 {
	out := make([]float64, H*(S+3)*hd)
	for s := 0; s < S; s++ {
		for g := 0; g < H; g++ {
			copy(out[(g*(S+3)+s)*hd:(g*(S+3)+s+1)*hd], x[(s*H+g)*hd:(s*H+g+1)*hd])
		}
	}
	return out
}

func TestSwiGLU(t *testing.T) {
	r := rng.New(4)
	g, u := rand64(r, 50), rand64(r, 50)
	for i := range g {
		g[i] *= 6 // reach both tails of the sigmoid
	}
	want := RefSwiGLU(g, u)
	a := make([]float32, 50)
	SwiGLU(a, to32(g), to32(u))
	closeTo(t, "swiglu", a, want, 1e-6)

	c := rand64(r, 50)
	dg, du := nans(50), nans(50) // it must write every element
	SwiGLUBackward(dg, du, c, g, u)
	fdCheck(t, "swiglu dg", g, func(x []float64) []float64 { return RefSwiGLU(x, u) }, c, dg)
	fdCheck(t, "swiglu du", u, func(x []float64) []float64 { return RefSwiGLU(g, x) }, c, du)

	// float32 (the vector kernels, then a tail) against the float64 results.
	dg32, du32 := make([]float32, 50), make([]float32, 50)
	for i := range dg32 {
		dg32[i], du32[i] = float32(math.NaN()), float32(math.NaN())
	}
	SwiGLUBackward(dg32, du32, to32(c), to32(g), to32(u))
	closeTo(t, "swiglu dg, float32", dg32, dg, 1e-5)
	closeTo(t, "swiglu du, float32", du32, du, 1e-5)
	// Far tails: the gate's sigmoid saturates to 0 and 1 without NaN.
	big := []float32{-100, 100, -1e30, 1e30, -90, 90, 0, 1}
	out := make([]float32, 8)
	SwiGLU(out, big, []float32{1, 1, 1, 1, 1, 1, 1, 1})
	for i, v := range out {
		if want := RefSwiGLU([]float64{float64(big[i])}, []float64{1})[0]; math.Abs(float64(v)-want) > 1e-6*math.Abs(want)+1e-30 {
			t.Fatalf("swiglu(%v) = %v, want %v", big[i], v, want)
		}
	}
}

func TestLogSumExpStable(t *testing.T) {
	row := []float32{1000, 1000, -1000}
	if l := LogSumExp(row); math.Abs(l-(1000+math.Ln2)) > 1e-9 {
		t.Fatalf("lse %v", l)
	}
}

// tiny-llama3 must put a frequency in each of Llama-3's three bands (kept,
// slowed, blended), or the golden test would not cover the blend.
func TestTinyLlama3CoversAllBands(t *testing.T) {
	cfg := model.Presets["tiny-llama3"]
	scaled := InvFreq(cfg)
	cfg.RopeScaling = nil
	plain := InvFreq(cfg)
	var kept, slowed, blended int
	for i := range plain {
		switch r := plain[i] / scaled[i]; {
		case math.Abs(r-1) < 1e-6:
			kept++
		case math.Abs(r-8) < 1e-4:
			slowed++
		default:
			blended++
		}
	}
	if kept == 0 || slowed == 0 || blended == 0 {
		t.Fatalf("bands kept %d slowed %d blended %d", kept, slowed, blended)
	}
}

// ExpSlice (the AVX2 body and the scalar tail) against math.Exp over the
// whole float32 range, in ulps, plus the edges.
// The vector max and shifted exp-sum against plain loops, at lengths that
// end inside and outside their vector bodies, with the max in the tail.
func TestSoftmaxPieces(t *testing.T) {
	r := rng.New(11)
	for _, n := range []int{1, 7, 8, 31, 32, 33, 100, 8192 + 5} {
		x := to32(rand64(r, n))
		for i := range x {
			x[i] *= 40
		}
		x[n-1] = 200 // the largest sits past the vector body
		if got := maxOf(x); got != 200 {
			t.Fatalf("n=%d: max %v", n, got)
		}
		x[n-1] = -200
		want := x[0]
		for _, v := range x {
			want = max(want, v)
		}
		if got := maxOf(x); got != want {
			t.Fatalf("n=%d: max %v, want %v", n, got, want)
		}
		shift := want - 3
		e := append([]float32(nil), x...)
		sum := expShiftSum(e, shift)
		var wantSum float64
		for i, v := range x {
			w := math.Exp(float64(v - shift))
			wantSum += w
			if math.Abs(float64(e[i])-w) > 3e-7*w+1e-37 { // below float32's range: 0
				t.Fatalf("n=%d: e^(x[%d]-shift) = %v, want %v", n, i, e[i], w)
			}
		}
		if math.Abs(sum-wantSum) > 1e-6*wantSum {
			t.Fatalf("n=%d: sum %v, want %v", n, sum, wantSum)
		}
		for _, inv := range []float64{1, 1 / 0.7} {
			mx, sum := ScaledExps(e, x, inv)
			wantSum = 0
			for i, v := range x {
				arg := (float64(v) - float64(want)) * inv
				w := math.Exp(arg)
				wantSum += w
				// The argument rounds to float32: a relative error up to |arg|·2⁻²⁴.
				if math.Abs(float64(e[i])-w) > (3e-7+6e-8*math.Abs(arg))*w+1e-37 {
					t.Fatalf("n=%d inv=%v: e[%d] = %v, want %v", n, inv, i, e[i], w)
				}
			}
			if mx != want || math.Abs(sum-wantSum) > 1e-6*wantSum {
				t.Fatalf("n=%d inv=%v: max %v sum %v, want %v and %v", n, inv, mx, sum, want, wantSum)
			}
		}
		p := append([]float32(nil), x...)
		Softmax(p)
		lse := LogSumExp(x)
		for i, v := range x {
			if w := math.Exp(float64(v) - lse); math.Abs(float64(p[i])-w) > 1e-6 {
				t.Fatalf("n=%d: p[%d] = %v, want %v", n, i, p[i], w)
			}
		}
	}
	nan := make([]float32, 40)
	nan[3] = float32(math.NaN()) // inside the vector body, which does not carry it
	if l := LogSumExp(nan); l == l {
		t.Fatalf("LogSumExp of a row with NaN = %v", l)
	}
	if _, sum := normalize(nan); sum == sum {
		t.Fatalf("softmax of a row with NaN summed to %v", sum)
	}
}

// normalize (one vector call for float32) against its pieces, at lengths
// around the vector width, with the max in the masked tail; nothing past
// the row is read into it or written.
func TestNormalizeMatchesPieces(t *testing.T) {
	r := rng.New(12)
	for n := 1; n <= 41; n++ {
		buf := to32(rand64(r, n+8))
		for i := range buf {
			buf[i] *= 10
		}
		for i := n; i < len(buf); i++ {
			buf[i] = 1000 // a larger "max" just past the row
		}
		x := buf[:n]
		x[n-1] = 30
		want := append([]float32(nil), x...)
		wantMax := maxOf(want)
		wantSum := expShiftSum(want, wantMax)
		inv := float32(1 / wantSum)
		for i := range want {
			want[i] *= inv
		}
		mx, sum := normalize(x)
		if mx != wantMax || math.Abs(sum-wantSum) > 1e-12*wantSum {
			t.Fatalf("n=%d: max %v sum %v, want %v and %v", n, mx, sum, wantMax, wantSum)
		}
		for i := range want {
			if x[i] != want[i] && math.Abs(float64(x[i]-want[i])) > 1e-7 {
				t.Fatalf("n=%d: p[%d] = %v, want %v", n, i, x[i], want[i])
			}
		}
		for i := n; i < len(buf); i++ {
			if buf[i] != 1000 {
				t.Fatalf("n=%d: wrote %v past the row at %d", n, buf[i], i)
			}
		}
	}
}

func TestExpSlice(t *testing.T) {
	var xs []float32
	for x := float32(-87.3); x < 88.7; x += 0.0013 {
		xs = append(xs, x)
	}
	xs = append(xs, 0, -1000, 100, float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), -87.4, 88.8)
	got := make([]float32, len(xs))
	ExpSlice(got, xs)
	worst := 0.0
	for i, x := range xs[:len(xs)-8] {
		want := math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
		if e := math.Abs(float64(got[i])-want) / ulp; e > worst {
			worst = e
		}
		if s := exp32(x); math.Abs(float64(s)-want)/ulp > 3 {
			t.Fatalf("scalar exp32(%v) = %v, want %v", x, s, want)
		}
	}
	if worst > 3 {
		t.Fatalf("ExpSlice error up to %.2f ulp", worst)
	}
	e := got[len(got)-8:]
	if e[0] != 1 || e[1] != 0 || !math.IsInf(float64(e[2]), 1) || e[3] == e[3] || e[4] != 0 || !math.IsInf(float64(e[5]), 1) || e[6] != 0 || !math.IsInf(float64(e[7]), 1) {
		t.Fatalf("edges: %v", e)
	}
}

func BenchmarkExpSlice(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i)/4096*20 - 10
	}
	out := make([]float32, len(xs))
	b.SetBytes(4 * 4096)
	for i := 0; i < b.N; i++ {
		ExpSlice(out, xs)
	}
}

// BenchmarkAttention is causal attention over one sequence on the small
// preset's heads (8 query heads, 4 kv heads, head size 64): a training
// sequence of 128 forward and backward, and a 1,024-token prefill forward;
// and on the tiny preset's (4, 2, 8) the 16-token forward the service
// benchmark submits, all short rows and narrow products.
func BenchmarkAttention(b *testing.B) {
	for _, c := range []struct {
		name        string
		T           int
		backward    bool
		Hq, Hkv, hd int
	}{
		{"train128", 128, true, 8, 4, 64}, {"prefill1024", 1024, false, 8, 4, 64},
		{"tiny16", 16, false, 4, 2, 8}, // the tiny model's 16-token forward: short rows, a narrow head
	} {
		b.Run(c.name, func(b *testing.B) {
			r := rng.New(1)
			Hq, Hkv, hd := c.Hq, c.Hkv, c.hd
			T, Q, KV := c.T, Hq*hd, Hkv*hd
			q, k, v := to32(rand64(r, T*Q)), to32(rand64(r, T*KV)), to32(rand64(r, T*KV))
			out, lse, dout := make([]float32, T*Q), make([]float32, Hq*T), to32(rand64(r, T*Q))
			dq, dk, dv := make([]float32, T*Q), make([]float32, T*KV), make([]float32, T*KV)
			for i := 0; i < b.N; i++ {
				Attention(out, lse, q, k, v, T, T, Hq, Hkv, hd, KVLayout{Row: KV, Head: hd})
				if c.backward {
					AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, T, T, Hq, Hkv, hd)
				}
			}
		})
	}
}

// BenchmarkSwiGLU is the small preset's MLP activation over a 512-token
// step ([512, 1280]), forward and backward.
func BenchmarkSwiGLU(b *testing.B) {
	r := rng.New(1)
	n := 512 * 1280
	g, u, da := to32(rand64(r, n)), to32(rand64(r, n)), to32(rand64(r, n))
	a, dg, du := make([]float32, n), make([]float32, n), make([]float32, n)
	b.SetBytes(int64(4 * 7 * n))
	for i := 0; i < b.N; i++ {
		SwiGLU(a, g, u)
		SwiGLUBackward(dg, du, da, g, u)
	}
}

// BenchmarkRMSNorm is the norm at a decode step of 16 rows of the tiny and
// the small preset, and at a 512-token training step of small.
func BenchmarkRMSNorm(b *testing.B) {
	for _, s := range [][2]int{{16, 32}, {16, 512}, {512, 512}} {
		T, D := s[0], s[1]
		r := rng.New(1)
		x, w := to32(rand64(r, T*D)), to32(rand64(r, D))
		y, inv := make([]float32, T*D), make([]float32, T)
		b.Run(fmt.Sprintf("%dx%d", T, D), func(b *testing.B) {
			for b.Loop() {
				RMSNorm(y, inv, x, w, T, D, 1e-5)
			}
		})
	}
}

// BenchmarkSoftmax is one attention row in place: the tiny model's short
// rows (9, 16), a decode row at the bench's 80 positions, a training row.
func BenchmarkSoftmax(b *testing.B) {
	for _, n := range []int{9, 16, 80, 128} {
		x := to32(rand64(rng.New(1), n))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				Softmax(x) // a softmax of a softmax costs what the first did
			}
		})
	}
}
