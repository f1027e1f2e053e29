package harness

import (
	"bytes"
	"image/png"
	"slices"
	"testing"
	"time"
)

func TestParseRange(t *testing.T) {
	for in, want := range map[string]Range{"16": {16, 16}, "8-64": {8, 64}, " 3 - 5 ": {3, 5}} {
		if got, err := ParseRange(in); err != nil || got != want {
			t.Fatalf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "0", "9-3", "x", "4-", "-2"} {
		if _, err := ParseRange(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// Nearest-rank quantiles: the smallest value with at least q of the
// values at or below it.
func TestQuantile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]float64{0: 1, 0.5: 5, 0.9: 9, 0.99: 10, 1: 10} {
		if got := quantile(v, q); got != want {
			t.Fatalf("q %v: %v, want %v", q, got, want)
		}
	}
	if quantile(nil, 0.5) != 0 {
		t.Fatal("empty")
	}
}

func TestSLO(t *testing.T) {
	s := SLO{TTFT: 100 * time.Millisecond, ITL: 10 * time.Millisecond}
	if !s.met(190*time.Millisecond, 10) || s.met(191*time.Millisecond, 10) || !s.met(100*time.Millisecond, 1) || s.met(101*time.Millisecond, 1) {
		t.Fatal("the SLO's bound is TTFT + (n−1)·ITL")
	}
}

// Ticks are round, about five, and cover the range.
func TestTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 1}, {0, 7.3}, {20, 120}, {0.001, 0.0042}, {3, 3.5}, {0, 12345}} {
		ts := ticks(r[0], r[1])
		if len(ts) < 3 || len(ts) > 12 || ts[0] > r[0] || ts[len(ts)-1] < r[1] || !slices.IsSorted(ts) {
			t.Fatalf("%v: %v", r, ts)
		}
	}
}

// A chart is a PNG of the set size whose series show in their colours.
func TestChartDraws(t *testing.T) {
	c := &Chart{Title: "t", XLabel: "x", YLabel: "y", Series: []Series{
		{Name: "a", X: []float64{1, 2, 3}, Y: []float64{10, 20, 15}},
		{Name: "b", X: []float64{1, 3}, Y: []float64{5, 30}},
	}}
	var buf bytes.Buffer
	if err := c.WritePNG(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil || img.Bounds().Dx() != chartW || img.Bounds().Dy() != chartH {
		t.Fatal(err, img.Bounds())
	}
	seen := map[[3]uint32]int{}
	for y := 0; y < chartH; y++ {
		for x := 0; x < chartW; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r >> 8, g >> 8, b >> 8}]++
		}
	}
	for i := range c.Series {
		p := palette[i]
		if seen[[3]uint32{uint32(p.R), uint32(p.G), uint32(p.B)}] < 50 {
			t.Fatalf("series %d's colour hardly drawn", i)
		}
	}
}

// A level's figures from its outcomes: probes give the time to first
// token, the others the end-to-end latency and, less the probes' median,
// the inter-token latency; errors are counted apart.
func TestLevelSum(t *testing.T) {
	cfg := &Config{SLO: SLO{TTFT: 20 * time.Millisecond, ITL: 5 * time.Millisecond}}
	l := &level{cfg: cfg}
	start := time.Now()
	add := func(probe bool, tokens int, ms int, err bool) {
		d := time.Duration(ms) * time.Millisecond
		l.done = append(l.done, outcome{probe: probe, tokens: tokens, latency: d, err: err, end: start.Add(time.Second)})
	}
	add(true, 1, 10, false)
	add(true, 1, 12, false)
	add(true, 1, 14, false)
	add(false, 11, 62, false) // ITL (62−12)/10 = 5: meets the SLO (20 + 50)
	add(false, 11, 112, false)
	add(false, 0, 5, true)
	got := l.sum(10, start)
	if got.Requests != 5 || got.Errors != 1 || got.Seconds != 1 || got.TokensPerS != 25 || got.GoodputPerS != 1 {
		t.Fatalf("%+v", got)
	}
	if got.TTFT.P50 != 12 || got.ITL.P50 != 5 || got.ITL.P99 != 10 || got.E2E.P50 != 62 || got.E2E.P99 != 112 {
		t.Fatalf("ttft %v itl %v e2e %v", got.TTFT, got.ITL, got.E2E)
	}
}
