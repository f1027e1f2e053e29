package harness

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line of a chart: points (X[i], Y[i]) joined in order.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is a line chart drawn as a PNG: axes with round ticks, a line per
// series in its own colour, and a legend. The harness draws its own plots
// so that a run needs nothing beyond the binary.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
}

const (
	chartW, chartH = 720, 440
	marginL        = 70
	marginR        = 20
	marginT        = 44
	marginB        = 50
	maxMarked      = 50 // series of at most this many points get a marker on each
)

// palette holds the series' colours, distinct in colour and in lightness.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// WritePNG draws the chart into w.
func (c *Chart) WritePNG(w io.Writer) error {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	x0, x1, y0, y1 := c.bounds()
	xt, yt := ticks(x0, x1), ticks(y0, y1)
	x0, x1, y0, y1 = min(x0, xt[0]), max(x1, xt[len(xt)-1]), min(y0, yt[0]), max(y1, yt[len(yt)-1])
	px := func(x float64) int { return marginL + int((x-x0)/(x1-x0)*float64(chartW-marginL-marginR)) }
	py := func(y float64) int { return chartH - marginB - int((y-y0)/(y1-y0)*float64(chartH-marginT-marginB)) }
	grid, ink := color.RGBA{225, 225, 225, 255}, color.RGBA{40, 40, 40, 255}
	for _, t := range xt {
		line(img, px(t), marginT, px(t), chartH-marginB, grid, 1)
		label := format(t)
		text(img, px(t)-len(label)*7/2, chartH-marginB+16, label, ink)
	}
	for _, t := range yt {
		line(img, marginL, py(t), chartW-marginR, py(t), grid, 1)
		label := format(t)
		text(img, marginL-6-len(label)*7, py(t)+4, label, ink)
	}
	line(img, marginL, chartH-marginB, chartW-marginR, chartH-marginB, ink, 1)
	line(img, marginL, marginT, marginL, chartH-marginB, ink, 1)
	text(img, marginL, 16, c.Title, ink)
	text(img, (chartW-len(c.XLabel)*7)/2, chartH-12, c.XLabel, ink)
	text(img, 4, marginT-10, c.YLabel, ink)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		for j := 1; j < len(s.X); j++ {
			line(img, px(s.X[j-1]), py(s.Y[j-1]), px(s.X[j]), py(s.Y[j]), col, 2)
		}
		if len(s.X) <= maxMarked { // a few measured points: show each
			for j := range s.X {
				line(img, px(s.X[j]), py(s.Y[j]), px(s.X[j]), py(s.Y[j]), col, 6)
			}
		}
	}
	// The legend, on a white box over the lines' top right.
	wide := 0
	for _, s := range c.Series {
		wide = max(wide, len(s.Name))
	}
	lx := chartW - marginR - 40 - wide*7
	fill(img, image.Rect(lx-6, marginT+2, chartW-marginR-2, marginT+10+len(c.Series)*16), color.RGBA{255, 255, 255, 255})
	for i, s := range c.Series {
		ly := marginT + 16 + i*16
		line(img, lx, ly-4, lx+20, ly-4, palette[i%len(palette)], 3)
		text(img, lx+26, ly, s.Name, ink)
	}
	return png.Encode(w, img)
}

// bounds is the data's extent, widened where it is a single value.
func (c *Chart) bounds() (x0, x1, y0, y1 float64) {
	x0, y0, x1, y1 = math.Inf(1), 0, math.Inf(-1), math.Inf(-1) // y from 0
	for _, s := range c.Series {
		for i := range s.X {
			x0, x1 = min(x0, s.X[i]), max(x1, s.X[i])
			y0, y1 = min(y0, s.Y[i]), max(y1, s.Y[i])
		}
	}
	if math.IsInf(x0, 1) {
		return 0, 1, 0, 1
	}
	if x1 <= x0 {
		x0, x1 = x0-1, x1+1
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	return x0, x1, y0, y1
}

// ticks are round values (1, 2 or 5 times a power of ten apart) that
// cover [lo, hi] in about five steps.
func ticks(lo, hi float64) []float64 {
	raw := (hi - lo) / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * pow; step >= raw {
			break
		}
	}
	var out []float64
	for t := math.Floor(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, t)
	}
	if out[len(out)-1] < hi {
		out = append(out, out[len(out)-1]+step)
	}
	return out
}

// format writes a tick's value briefly.
func format(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return fmt.Sprintf("%.4g", v)
	}
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws from (x0, y0) to (x1, y1), width w (Bresenham's walk, a
// square pen).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, w int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for i := -w / 2; i <= (w-1)/2; i++ {
			for j := -w / 2; j <= (w-1)/2; j++ {
				if p := image.Pt(x0+i, y0+j); p.In(img.Bounds()) {
					img.SetRGBA(p.X, p.Y, c)
				}
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

// text writes s with its baseline's left end at (x, y), in a 7×13 bitmap
// font.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
