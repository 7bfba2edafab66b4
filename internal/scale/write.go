package scale

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// WriteCSV writes the points, a row per metric (a row with an empty
// metric for a point that measured nothing, so that its note stays).
func WriteCSV(w io.Writer, ps []Point) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"target", "sweep", "x", "reached", "metric", "value", "note"})
	for _, p := range ps {
		row := func(metric, value string) {
			_ = cw.Write([]string{p.Target, p.Sweep, strconv.Itoa(p.X), strconv.Itoa(p.Reached), metric, value, p.Note})
		}
		if len(p.Values) == 0 {
			row("", "")
			continue
		}
		for _, m := range slices.Sorted(maps.Keys(p.Values)) {
			row(m, strconv.FormatFloat(p.Values[m], 'g', 6, 64))
		}
	}
	cw.Flush()
	return cw.Error()
}

// palette colours the targets' lines, in the order they first appear.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939"}

// Panel geometry.
const (
	panelW, panelH = 440, 300
	marginL        = 70
	marginR        = 15
	marginT        = 32
	marginB        = 45
	columns        = 2
)

// WriteSVG draws the charts of one sweep, one panel per metric in
// Charts, the targets as lines; the x axis is logarithmic, the y axis
// too when its values span more than a factor of 50.
func WriteSVG(w io.Writer, sweep string, ps []Point) error {
	var targets []string
	for _, p := range ps {
		if p.Sweep == sweep && !slices.Contains(targets, p.Target) {
			targets = append(targets, p.Target)
		}
	}
	charts := slices.DeleteFunc(slices.Clone(Charts), func(c Chart) bool { return c.Sweep != sweep })
	rows := (len(charts) + columns - 1) / columns
	legendH := 22 * ((len(targets) + 5) / 6)
	width, height := columns*panelW, rows*panelH+legendH+10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, t := range targets {
		x, y := 10+(i%6)*145, 16+22*(i/6)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/><text x="%d" y="%d">%s</text>`+"\n",
			x, y-4, x+22, y-4, palette[i%len(palette)], x+27, y, html.EscapeString(t))
	}
	for i, c := range charts {
		ox, oy := (i%columns)*panelW, legendH+10+(i/columns)*panelH
		panel(&b, ox, oy, c, sweep, targets, ps)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// series is one target's points of one metric.
type series struct {
	xs, ys []float64
}

func panel(b *strings.Builder, ox, oy int, c Chart, sweep string, targets []string, ps []Point) {
	data := map[string]series{}
	var xs, ys []float64
	for _, p := range ps {
		v, ok := p.Values[c.Metric]
		if p.Sweep != sweep || !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		x := float64(p.Reached)
		if x <= 0 {
			x = float64(p.X)
		}
		s := data[p.Target]
		s.xs, s.ys = append(s.xs, x), append(s.ys, v)
		data[p.Target] = s
		xs, ys = append(xs, x), append(ys, v)
	}
	pw, ph := float64(panelW-marginL-marginR), float64(panelH-marginT-marginB)
	x0, y0 := float64(ox+marginL), float64(oy+marginT)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>`+"\n", ox+marginL, oy+18, html.EscapeString(c.Title))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", x0+pw/2, oy+panelH-8, html.EscapeString(XLabel(sweep)))
	fmt.Fprintf(b, `<text transform="translate(%d,%.0f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", ox+14, y0+ph/2, html.EscapeString(c.YLabel))
	if len(xs) == 0 {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#999">not measured</text>`+"\n", x0+pw/2, y0+ph/2)
		return
	}
	xa := newAxis(xs, true)
	ya := newAxis(ys, false)
	for _, t := range xa.ticks() {
		px := x0 + xa.pos(t)*pw
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eee"/><text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n",
			px, y0, px, y0+ph, px, y0+ph+14, label(t))
	}
	for _, t := range ya.ticks() {
		py := y0 + ph - ya.pos(t)*ph
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, py, x0+pw, py, x0-4, py+4, label(t))
	}
	for i, t := range targets {
		s, ok := data[t]
		if !ok {
			continue
		}
		col := palette[i%len(palette)]
		var pts []string
		for j := range s.xs {
			px, py := x0+xa.pos(s.xs[j])*pw, y0+ph-ya.pos(s.ys[j])*ph
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s at %s</title></circle>`+"\n",
				px, py, col, html.EscapeString(t), label(s.ys[j]), label(s.xs[j]))
		}
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
		}
	}
}

// axis maps values to [0, 1], linearly from zero or logarithmically.
type axis struct {
	log      bool
	lo, hi   float64
	linStep  float64
	logTicks []float64
}

// newAxis fits vs; forceLog makes it logarithmic whatever the span (the
// sweeps' x values grow by factors of 10).
func newAxis(vs []float64, forceLog bool) axis {
	lo, hi := slices.Min(vs), slices.Max(vs)
	if (forceLog || (lo > 0 && hi/lo > 50)) && lo > 0 {
		a := axis{log: true, lo: math.Pow(10, math.Floor(math.Log10(lo))), hi: math.Pow(10, math.Ceil(math.Log10(hi)))}
		if a.hi == a.lo {
			a.hi *= 10
		}
		for t := a.lo; t <= a.hi*1.0001; t *= 10 {
			a.logTicks = append(a.logTicks, t)
		}
		return a
	}
	lo = math.Min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	return axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step, linStep: step}
}

func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func (a axis) pos(v float64) float64 {
	if a.log {
		return (math.Log10(math.Max(v, a.lo)) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (v - a.lo) / (a.hi - a.lo)
}

func (a axis) ticks() []float64 {
	if a.log {
		return a.logTicks
	}
	var out []float64
	for t := a.lo; t <= a.hi+a.linStep/2; t += a.linStep {
		out = append(out, t)
	}
	return out
}

// label prints a value in at most 4 significant digits, scaled by k or M.
func label(v float64) string {
	switch av := math.Abs(v); {
	case av >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case av >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// WriteDir writes scale.csv and one chart per sweep (waiters.svg,
// held.svg, clients.svg) into dir, which it makes if need be.
func WriteDir(dir string, ps []Point) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, fn func(io.Writer) error) error {
		var b bytes.Buffer
		if err := fn(&b); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o666)
	}
	if err := write("scale.csv", func(w io.Writer) error { return WriteCSV(w, ps) }); err != nil {
		return err
	}
	for _, s := range []string{SweepWaiters, SweepHeld, SweepClients} {
		if err := write(s+".svg", func(w io.Writer) error { return WriteSVG(w, s, ps) }); err != nil {
			return err
		}
	}
	return nil
}
