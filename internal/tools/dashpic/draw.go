package main

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"
)

// The picture's geometry, in pixels: Grafana's 24 columns across width,
// rowH a unit of gridPos's height.
const (
	width   = 1200
	margin  = 8
	headerH = 40
	rowH    = 42
	lineH   = 16 // a caption or legend line
	charW   = 6.4
)

// Grafana's dark theme, and its classic palette for the series.
const (
	bgColor    = "#111217"
	panelColor = "#181b1f"
	edgeColor  = "#2c3235"
	textColor  = "#ccccdc"
	dimColor   = "#8e8e9e"
)

var palette = []string{"#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9",
	"#37872D", "#FADE2A", "#C15C17", "#1F78C1", "#CA95E5", "#96D98D", "#FFB357"}

// drawDashboard draws the panels where the dashboard's gridPos puts them,
// each with its series over the run and the workload's events, and the
// caption below.
func drawDashboard(d *dashboard, panels [][]series, w *workload, caption []string) string {
	col := float64(width-2*margin) / 24
	bottom := 0
	for _, p := range d.Panels {
		bottom = max(bottom, p.GridPos.Y+p.GridPos.H)
	}
	height := headerH + bottom*rowH + margin + len(caption)*lineH + margin
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Inter, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="%s"/>`+"\n", bgColor)
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="17" fill="%s">%s</text>`, margin+4, textColor, html.EscapeString(d.Title))
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="12" fill="%s" text-anchor="end">backend: All · name class: All · %s to %s UTC</text>`+"\n",
		width-margin-4, dimColor, w.start.UTC().Format("15:04:05"), w.end.UTC().Format("15:04:05"))
	for i, p := range d.Panels {
		x := float64(margin) + float64(p.GridPos.X)*col
		y := float64(headerH + p.GridPos.Y*rowH)
		drawPanel(&b, p, panels[i], w, x+4, y+4, float64(p.GridPos.W)*col-8, float64(p.GridPos.H*rowH)-8)
	}
	for i, line := range caption {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" fill="%s">%s</text>`+"\n",
			margin+4, headerH+bottom*rowH+margin+(i+1)*lineH-4, dimColor, html.EscapeString(line))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// legendItem is a legend entry, placed.
type legendItem struct {
	text, color string
	x, row      float64
}

// drawPanel draws one panel in the box at (x, y) of size pw×ph: its title,
// axes, the workload's events, a polyline per series that is above zero
// at some step, and a legend naming them (the others are counted).
func drawPanel(b *strings.Builder, p panel, ss []series, w *workload, x, y, pw, ph float64) {
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="3" fill="%s" stroke="%s"/>`+"\n", x, y, pw, ph, panelColor, edgeColor)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="600" fill="%s">%s</text>`+"\n", x+10, y+20, textColor, html.EscapeString(p.Title))

	// The legend, laid out first: its height takes from the plot's.
	const left, right = 74, 14
	var items []legendItem
	var shown []series
	flat := 0
	lx, row := x+left, 0.0
	add := func(text, color string) {
		iw := 26 + charW*float64(len(text)) + 14
		if lx+iw > x+pw-right && lx > x+left {
			lx, row = x+left, row+1
		}
		items = append(items, legendItem{text: text, color: color, x: lx, row: row})
		lx += iw
	}
	for _, s := range ss {
		if s.flat() {
			flat++
			continue
		}
		add(s.legend, palette[len(shown)%len(palette)])
		shown = append(shown, s)
	}
	if flat > 0 {
		add(fmt.Sprintf("+%d more series, 0 or empty throughout", flat), "")
	}
	legendTop := y + ph - 8 - (row+1)*lineH
	x0, x1 := x+left, x+pw-right
	y0, y1 := y+32, legendTop-22 // plot box: x0..x1 across, y0..y1 down

	top, step := yTicks(ss)
	px := func(i int, n int) float64 { return x0 + (x1-x0)*float64(i)/float64(max(n-1, 1)) }
	py := func(v float64) float64 { return y1 - (y1-y0)*v/top }

	for i := 0.0; i*step <= top+step/2; i++ {
		v := i * step
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x0, py(v), x1, py(v), edgeColor)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", x0-6, py(v)+4, dimColor, unitLabel(p.FieldConfig.Defaults.Unit, v))
	}
	span := w.end.Sub(w.start).Seconds()
	at := func(t time.Time) float64 { return x0 + (x1-x0)*t.Sub(w.start).Seconds()/span }
	tickStep := timeTick(w.end.Sub(w.start))
	for t := w.start.Truncate(tickStep).Add(tickStep); !t.After(w.end); t = t.Add(tickStep) {
		if at(t)-x0 < 24 || x1-at(t) < 24 {
			continue // its label would run into the y axis's, or out of the panel
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, at(t), y0, at(t), y1, edgeColor)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", at(t), y1+14, dimColor, t.UTC().Format("15:04:05"))
	}
	for _, e := range w.events {
		switch e.kind {
		case "stall", "burst":
			color := map[string]string{"stall": "#F2495C", "burst": "#5794F2"}[e.kind]
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.13"/>`+"\n",
				at(e.from), y0, at(e.to)-at(e.from), y1-y0, color)
		case "delete":
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#FF9830" stroke-dasharray="4 3"/>`+"\n",
				at(e.from), y0, at(e.from), y1)
		}
	}
	for i, s := range shown {
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`+"\n",
					strings.Join(pts, " "), items[i].color)
			}
			pts = pts[:0]
		}
		for j, v := range s.values {
			if math.IsNaN(v) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(j, len(s.values)), py(v)))
		}
		flush()
	}
	for _, it := range items {
		ty := legendTop + (it.row+1)*lineH - 4
		if it.color != "" {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="16" height="4" rx="1" fill="%s"/>`, it.x, ty-7, it.color)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", it.x+22, ty, map[bool]string{true: textColor, false: dimColor}[it.color != ""], html.EscapeString(it.text))
	}
}

// yTicks returns the y axis's top and the step of its ticks: round
// values, at most five steps up to the highest value of ss.
func yTicks(ss []series) (top, step float64) {
	hi := 0.0
	for _, s := range ss {
		for _, v := range s.values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				hi = max(hi, v)
			}
		}
	}
	if hi == 0 {
		return 1, 0.25
	}
	decade := math.Pow(10, math.Floor(math.Log10(hi)))
	for _, f := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2} {
		if step = f * decade; math.Ceil(hi/step) <= 5 {
			break
		}
	}
	return math.Ceil(hi/step) * step, step
}

// timeTick is the step of the time axis's ticks: a round one giving at
// most seven.
func timeTick(span time.Duration) time.Duration {
	for _, s := range []time.Duration{5, 10, 15, 30, 60, 120, 300, 600} {
		if span/(s*time.Second) <= 7 {
			return s * time.Second
		}
	}
	return time.Hour
}

// unitLabel prints v in Grafana's unit: seconds as ms below a second,
// ops as a rate, short as a plain number.
func unitLabel(unit string, v float64) string {
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	switch {
	case v == 0:
		return "0"
	case unit == "s" && v < 1:
		return g(v*1000) + " ms"
	case unit == "s":
		return g(v) + " s"
	case unit == "ops":
		return g(v) + " ops/s"
	case v >= 1000:
		return g(v/1000) + "k"
	default:
		return g(v)
	}
}
