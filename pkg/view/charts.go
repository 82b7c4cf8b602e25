package view

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/rollout-dev/rollout/pkg/report"
)

// The charts are drawn on the server as SVG by the templates (charts.html): this file computes
// their geometry. Plain SVG keeps the page free of scripts and the binary free of a plotting
// dependency; every number a mark stands for is in its <title> (the tooltip) and data-*.

// palette colours the series and categories, in order (colour-blind-safe, Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999", "#000000"}

func colour(i int) string { return palette[i%len(palette)] }

// Tick is an axis mark: its position and label.
type Tick struct {
	Pos   float64
	Label string
}

// linear maps [lo, hi] onto [a, b].
type linear struct{ lo, hi, a, b float64 }

func (s linear) at(v float64) float64 {
	if s.hi == s.lo {
		return (s.a + s.b) / 2
	}
	return s.a + (v-s.lo)/(s.hi-s.lo)*(s.b-s.a)
}

// ticks are about n round-numbered marks over [lo, hi].
func (s linear) ticks(n int) []Tick {
	span := s.hi - s.lo
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return []Tick{{Pos: s.at(s.lo), Label: num(s.lo)}}
	}
	step := math.Pow(10, math.Floor(math.Log10(span/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	var out []Tick
	for v := math.Ceil(s.lo/step) * step; v <= s.hi+step*1e-9; v += step {
		out = append(out, Tick{Pos: s.at(v), Label: num(math.Round(v/step) * step)})
	}
	return out
}

// num is a number for a label: at most 4 significant digits.
func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// exact is a number as JSON writes it (for data-* attributes that tests compare).
func exact(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Whisker is one scope's mean with its 95% interval.
type Whisker struct {
	Scope, Label           string
	Y                      float64
	X, XLow, XHigh         float64
	Mean, Low, High        string // exact, for data-*
	Title                  string // the tooltip
	HasCI, Point, Normal   bool
	Scored, Rollouts, Fail int
}

// CIChart draws means with 95% CI whiskers, one row per scope.
type CIChart struct {
	ID            string
	Width, Height float64
	Left, Right   float64
	Rows          []Whisker
	Ticks         []Tick
	AxisY         float64
}

func newCIChart(id string, scopes []report.Scores, label func(*report.Scores) string) *CIChart {
	c := &CIChart{ID: id, Width: 720, Left: 190, Right: 690}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range scopes {
		s := &scopes[i]
		if s.Scored == 0 {
			continue
		}
		lo, hi = min(lo, s.MeanReward), max(hi, s.MeanReward)
		if s.CI95 != nil {
			lo, hi = min(lo, s.CI95.Low), max(hi, s.CI95.High)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	if lo >= 0 && lo <= 1 && hi <= 1 { // rewards in [0, 1]: the whole range
		lo, hi = 0, 1
	} else {
		pad := (hi - lo) * 0.05
		if pad == 0 {
			pad = math.Max(math.Abs(hi)*0.05, 0.5)
		}
		lo, hi = lo-pad, hi+pad
	}
	x := linear{lo, hi, c.Left, c.Right}
	const top, rowH = 16, 30
	for i := range scopes {
		s := &scopes[i]
		w := Whisker{Scope: s.Scope, Label: label(s), Y: top + rowH*float64(i) + rowH/2, Scored: s.Scored, Rollouts: s.Rollouts, Fail: s.Failed}
		if s.Scored > 0 {
			w.X, w.Mean = x.at(s.MeanReward), exact(s.MeanReward)
			w.Title = fmt.Sprintf("%s: mean %s", w.Label, num(s.MeanReward))
			if s.CI95 != nil {
				w.HasCI, w.Point, w.Normal = true, s.CI95.Point, s.CI95.Normal
				w.XLow, w.XHigh = x.at(s.CI95.Low), x.at(s.CI95.High)
				w.Low, w.High = exact(s.CI95.Low), exact(s.CI95.High)
				w.Title += fmt.Sprintf(", 95%% CI %s to %s", num(s.CI95.Low), num(s.CI95.High))
			}
			w.Title += fmt.Sprintf(" (%d scored of %d rollouts, %d failed)", s.Scored, s.Rollouts, s.Failed)
		} else {
			w.Title = fmt.Sprintf("%s: nothing scored (%d rollouts, %d failed)", w.Label, s.Rollouts, s.Failed)
		}
		c.Rows = append(c.Rows, w)
	}
	c.AxisY = top + rowH*float64(len(scopes)) + 4
	c.Height = c.AxisY + 26
	c.Ticks = x.ticks(8)
	return c
}

// Series is one line of a line chart.
type Series struct {
	Name, Colour string
	Points       string // the polyline's points
	Marks        []Mark
}

// Mark is a point with its tooltip.
type Mark struct {
	X, Y  float64
	R     float64 // radius, for a scatter's dot
	N     int     // how many it stands for
	Title string
	Value string // exact, for data-*
}

// LineChart draws pass@k or pass^k against k, one series per scope.
type LineChart struct {
	ID, Title     string
	Width, Height float64
	Left, Right   float64
	Top, Bottom   float64
	Series        []Series
	XTicks        []Tick
	YTicks        []Tick
}

func newPassChart(id, title string, scopes []report.Scores, hat bool) *LineChart {
	c := &LineChart{ID: id, Title: title, Width: 360, Height: 220, Left: 44, Right: 340, Top: 14, Bottom: 186}
	kmax := 1
	for _, s := range scopes {
		for _, p := range s.PassAtK {
			kmax = max(kmax, p.K)
		}
	}
	// k doubles: a log scale spaces 1, 2, 4, 8 evenly.
	x := linear{0, math.Log2(float64(kmax)), c.Left + 10, c.Right - 10}
	y := linear{0, 1, c.Bottom, c.Top}
	for k := 1; k <= kmax; k *= 2 {
		c.XTicks = append(c.XTicks, Tick{Pos: x.at(math.Log2(float64(k))), Label: strconv.Itoa(k)})
	}
	c.YTicks = y.ticks(5)
	for i, s := range scopes {
		se := Series{Name: s.Scope, Colour: colour(i)}
		for j, p := range s.PassAtK {
			v := p.PassAt
			if hat {
				v = p.PassHat
			}
			m := Mark{X: x.at(math.Log2(float64(p.K))), Y: y.at(v), Value: exact(v),
				Title: fmt.Sprintf("%s: %s = %s over %d tasks", s.Scope, kName(hat, p.K), num(v), p.Tasks)}
			if j > 0 {
				se.Points += " "
			}
			se.Points += fmt.Sprintf("%.1f,%.1f", m.X, m.Y)
			se.Marks = append(se.Marks, m)
		}
		c.Series = append(c.Series, se)
	}
	return c
}

func kName(hat bool, k int) string {
	if hat {
		return fmt.Sprintf("pass^%d", k)
	}
	return fmt.Sprintf("pass@%d", k)
}

// Segment is one category's part of a stacked bar.
type Segment struct {
	X, W   float64
	Colour string
	Title  string
	Name   string
	Count  int
}

// Bar is one scope's stacked bar.
type Bar struct {
	Label    string
	Y        float64
	Segments []Segment
	Total    int
}

// Legend is a category's colour.
type Legend struct{ Name, Colour string }

// StackChart draws, per scope, the shares of categories (terminations, failure classes).
type StackChart struct {
	ID            string
	Width, Height float64
	Left, Right   float64
	Bars          []Bar
	Legend        []Legend
	Empty         string // said when no scope has any
}

func newStackChart(id string, scopes []report.Scores, counts func(*report.Scores) map[string]int, empty string) *StackChart {
	c := &StackChart{ID: id, Width: 720, Left: 190, Right: 690}
	cats := map[string]bool{}
	for i := range scopes {
		for k := range counts(&scopes[i]) {
			cats[k] = true
		}
	}
	names := slices.Sorted(maps.Keys(cats))
	if len(names) == 0 {
		c.Empty, c.Height = empty, 0
		return c
	}
	for i, n := range names {
		c.Legend = append(c.Legend, Legend{Name: n, Colour: colour(i)})
	}
	const top, rowH = 10, 28
	for i := range scopes {
		s := &scopes[i]
		m := counts(s)
		b := Bar{Label: s.Scope, Y: top + rowH*float64(i)}
		for _, v := range m {
			b.Total += v
		}
		x := c.Left
		for j, n := range names {
			v := m[n]
			if v == 0 || b.Total == 0 {
				continue
			}
			w := float64(v) / float64(b.Total) * (c.Right - c.Left)
			b.Segments = append(b.Segments, Segment{X: x, W: w, Colour: colour(j), Name: n, Count: v,
				Title: fmt.Sprintf("%s: %s %d of %d (%.1f%%)", s.Scope, n, v, b.Total, 100*float64(v)/float64(b.Total))})
			x += w
		}
		c.Bars = append(c.Bars, b)
	}
	c.Height = top + rowH*float64(len(scopes)) + 6
	return c
}

// Bin is one bar of a histogram.
type Bin struct {
	X, W, Y, H float64
	Title      string
	Count      int
}

// Histogram draws the distribution of one column over every rollout.
type Histogram struct {
	ID, Title     string
	Width, Height float64
	Left, Right   float64
	Top, Bottom   float64
	Bins          []Bin
	XTicks        []Tick
	YTicks        []Tick
	N             int
}

// newHistogram bins values: one bin per whole number when they are whole and span at most
// 40, else 30 bins of equal width.
func newHistogram(id, title string, values []float64, whole bool) *Histogram {
	h := &Histogram{ID: id, Title: title, Width: 360, Height: 200, Left: 50, Right: 345, Top: 12, Bottom: 170, N: len(values)}
	if len(values) == 0 {
		return h
	}
	lo, hi := slices.Min(values), slices.Max(values)
	nb, width := 30, (hi-lo)/30
	if whole && hi-lo <= 40 {
		nb, width = int(hi-lo)+1, 1
		hi = lo + float64(nb)
	} else if hi == lo {
		nb, width, hi = 1, 1, lo+1
	}
	counts := make([]int, nb)
	for _, v := range values {
		b := int((v - lo) / width)
		counts[min(max(b, 0), nb-1)]++
	}
	most := slices.Max(counts)
	x := linear{lo, hi, h.Left, h.Right}
	y := linear{0, float64(most), h.Bottom, h.Top}
	for i, n := range counts {
		a, b := lo+float64(i)*width, lo+float64(i+1)*width
		bin := Bin{X: x.at(a), W: math.Max(x.at(b)-x.at(a)-1, 0.5), Y: y.at(float64(n)), Count: n}
		bin.H = h.Bottom - bin.Y
		if whole && width == 1 {
			bin.Title = fmt.Sprintf("%s %s: %d rollouts", title, num(a), n)
		} else {
			bin.Title = fmt.Sprintf("%s %s to %s: %d rollouts", title, num(a), num(b), n)
		}
		h.Bins = append(h.Bins, bin)
	}
	h.XTicks = x.ticks(5)
	if whole && width == 1 { // ticks under the bins' middles
		for i := range h.XTicks {
			h.XTicks[i].Pos += (x.at(lo+1) - x.at(lo)) / 2
		}
		if len(h.XTicks) > 0 && h.XTicks[len(h.XTicks)-1].Pos > h.Right {
			h.XTicks = h.XTicks[:len(h.XTicks)-1]
		}
	}
	h.YTicks = y.ticks(4)
	return h
}
