package benchmarks

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Charts are hand-written SVG: two simple chart types do not justify a
// plotting dependency, and the output stays diffable text.

const (
	panelW, panelH = 480, 300
	padL, padR     = 70, 20
	padT, padB     = 40, 50
)

// WriteSVG draws a result's charts side by side: the stage breakdown (busy
// and blocked time per stage as a share of wall time) and throughput vs
// workers (median rows/s with min–max whiskers, baselines as dashed lines).
// A result with neither (several configurations of one kind, like the
// drain sizes) gets a chart of median time per configuration instead; it
// reports false, writing nothing, when there is less than that to draw.
func WriteSVG(w io.Writer, res Result) (bool, error) {
	var panels []func(*strings.Builder, float64)
	if res.Stages != nil && len(res.Stages.Stages) > 0 && res.Stages.Wall > 0 {
		panels = append(panels, func(b *strings.Builder, x float64) { stageChart(b, x, *res.Stages) })
	}
	if pts := workerRows(res); len(pts) > 0 {
		panels = append(panels, func(b *strings.Builder, x float64) { workerChart(b, x, res, pts) })
	}
	if len(panels) == 0 {
		return timeChart(w, res)
	}
	var b strings.Builder
	width := panelW * len(panels)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, panelH, width, panelH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, panelH)
	for i, p := range panels {
		p(&b, float64(i*panelW))
	}
	b.WriteString("</svg>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return true, fmt.Errorf("write chart: %w", err)
	}
	return true, nil
}

func text(b *strings.Builder, x, y float64, anchor, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s">%s</text>`+"\n", x, y, anchor, html.EscapeString(s))
}

// stageChart draws one horizontal bar per stage.
func stageChart(b *strings.Builder, x0 float64, bd Breakdown) {
	text(b, x0+panelW/2, 20, "middle", "stage time, % of wall (busy + blocked)")
	wall := bd.Wall.Seconds()
	var top float64
	for _, st := range bd.Stages {
		top = max(top, (st.Busy+st.Blocked).Seconds()/wall*100)
	}
	top = niceCeil(top)
	plotW := float64(panelW - padL - padR)
	rowH := float64(panelH-padT-padB) / float64(len(bd.Stages))
	for i, st := range bd.Stages {
		y := padT + float64(i)*rowH
		busy := st.Busy.Seconds() / wall * 100
		blocked := st.Blocked.Seconds() / wall * 100
		bw, kw := busy/top*plotW, blocked/top*plotW
		text(b, x0+padL-6, y+rowH/2+4, "end", st.Stage)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#3b6ea5"><title>%s busy %.1f%%</title></rect>`+"\n",
			x0+padL, y+rowH*0.15, bw, rowH*0.7, html.EscapeString(st.Stage), busy)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#c9d7e8"><title>%s blocked %.1f%%</title></rect>`+"\n",
			x0+padL+bw, y+rowH*0.15, kw, rowH*0.7, html.EscapeString(st.Stage), blocked)
		text(b, x0+padL+bw+kw+4, y+rowH/2+4, "start", fmt.Sprintf("%.0f%%", busy))
	}
	axisX(b, x0, top, "%")
	fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="10" height="10" fill="#3b6ea5"/>`+"\n", x0+padL, panelH-16)
	text(b, x0+padL+14, panelH-7, "start", "busy (summed over workers)")
	fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="10" height="10" fill="#c9d7e8"/>`+"\n", x0+padL+200, panelH-16)
	text(b, x0+padL+214, panelH-7, "start", "blocked on downstream")
}

// axisX draws the x axis of the bar chart from 0 to top.
func axisX(b *strings.Builder, x0, top float64, unit string) {
	y := float64(panelH - padB)
	plotW := float64(panelW - padL - padR)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0+padL, y, x0+padL+plotW, y)
	for i := range 5 {
		v := top * float64(i) / 4
		x := x0 + padL + plotW*float64(i)/4
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x, y, x, y+4)
		text(b, x, y+16, "middle", fmt.Sprintf("%.0f%s", v, unit))
	}
}

// workerPoint is one worker count's throughput.
type workerPoint struct {
	workers      int
	processes    int // > 1: a point of the several-processes series
	med, lo, hi  float64
	baselineName string
}

// x is the point's place on the axis: its workers in all.
func (p workerPoint) x() int { return p.workers * max(p.processes, 1) }

// workerRows returns the rows that form a throughput vs workers series.
func workerRows(res Result) []workerPoint {
	var pts []workerPoint
	for _, r := range res.Rows {
		if r.Workers > 0 && len(r.Samples) > 0 {
			med, lo, hi := r.rate(func(s Sample) int64 { return s.Rows })
			pts = append(pts, workerPoint{r.Workers, r.Processes, med, lo, hi, r.Baseline})
		}
	}
	slices.SortFunc(pts, func(a, b workerPoint) int { return a.x() - b.x() })
	return pts
}

// workerChart draws median rows/s against workers with min–max whiskers,
// and the baselines of those rows as dashed horizontal lines. Rows of
// several processes form a second series against their workers in all,
// starting from the single process's 1-worker point.
func workerChart(b *strings.Builder, x0 float64, res Result, pts []workerPoint) {
	text(b, x0+panelW/2, 20, "middle", "throughput vs workers (median, min–max)")
	baselines := map[string]float64{}
	inSeries := map[string]bool{}
	for _, r := range res.Rows {
		inSeries[r.Name] = r.Workers > 0
	}
	var top float64
	for _, p := range pts {
		top = max(top, p.hi)
		if p.baselineName != "" && !inSeries[p.baselineName] { // a series point needs no line of its own
			for _, r := range res.Rows {
				if r.Name == p.baselineName && len(r.Samples) > 0 {
					med, _, _ := r.rate(func(s Sample) int64 { return s.Rows })
					baselines[r.Name] = med
					top = max(top, med)
				}
			}
		}
	}
	top = niceCeil(top)
	plotW, plotH := float64(panelW-padL-padR), float64(panelH-padT-padB)
	lo, hi := pts[0].x(), pts[len(pts)-1].x()
	xOf := func(w int) float64 {
		if hi == lo {
			return x0 + padL + plotW/2
		}
		return x0 + padL + plotW*(0.08+0.84*float64(w-lo)/float64(hi-lo)) // clear of the axis
	}
	yOf := func(v float64) float64 { return padT + plotH*(1-v/top) }
	// Axes with ticks.
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0+padL, yOf(0), x0+padL+plotW, yOf(0))
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0+padL, yOf(0), x0+padL, yOf(top))
	for i := range 5 {
		v := top * float64(i) / 4
		text(b, x0+padL-6, yOf(v)+4, "end", fmt.Sprintf("%.3gk", v/1000))
	}
	var single, multi []workerPoint
	ticked := map[int]bool{}
	for _, p := range pts {
		if !ticked[p.x()] {
			ticked[p.x()] = true
			text(b, xOf(p.x()), yOf(0)+16, "middle", fmt.Sprint(p.x()))
		}
		if p.processes > 1 {
			multi = append(multi, p)
		} else {
			single = append(single, p)
		}
	}
	label := "workers"
	if len(multi) > 0 {
		label = "workers in all (processes × workers per process)"
		for _, p := range single {
			if p.workers == 1 {
				multi = append([]workerPoint{p}, multi...)
				break
			}
		}
	}
	text(b, x0+padL+plotW/2, float64(panelH-12), "middle", label)
	text(b, x0+padL-6, padT-8, "end", "rows/s")
	for name, v := range baselines {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#a33" stroke-dasharray="5,4"/>`+"\n",
			x0+padL, yOf(v), x0+padL+plotW, yOf(v))
		text(b, x0+padL+plotW, yOf(v)-4, "end", name)
	}
	series := func(pts []workerPoint, color string) {
		var line []string
		for _, p := range pts {
			x := xOf(p.x())
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, yOf(p.lo), x, yOf(p.hi), color)
			what := fmt.Sprintf("%d workers", p.workers)
			if p.processes > 1 {
				what = fmt.Sprintf("%d processes × %d workers", p.processes, p.workers)
			}
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %.0f rows/s</title></circle>`+"\n",
				x, yOf(p.med), color, what, p.med)
			line = append(line, fmt.Sprintf("%.1f,%.1f", x, yOf(p.med)))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(line, " "), color)
	}
	series(single, "#3b6ea5")
	if len(multi) > 1 {
		series(multi, "#d9822b")
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="start" fill="#3b6ea5">— 1 process × N workers</text>`+"\n", x0+padL+8, float64(padT+12))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="start" fill="#d9822b">— N processes × 1 worker</text>`+"\n", x0+padL+8, float64(padT+28))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so axis ticks
// at quarters are readable.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// timeChart draws the median time of every row as a horizontal bar on a
// log scale, with min–max whiskers: the sizes of a scenario span orders of
// magnitude, and the baseline rows sit next to the rows they are compared
// with.
func timeChart(w io.Writer, res Result) (bool, error) {
	var rows []Row
	for _, r := range res.Rows {
		if len(r.Samples) > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) < 2 {
		return false, nil
	}
	const labelW, barW, rowH = 300, 400, 22
	width, height := labelW+barW+padR+40, padT+rowH*len(rows)+padB
	lo, hi := math.Inf(1), 0.0
	span := func(r Row) (med, min, max float64) {
		ds := make([]float64, len(r.Samples))
		for i, s := range r.Samples {
			ds[i] = s.Duration.Seconds()
		}
		slices.Sort(ds)
		return ds[len(ds)/2], ds[0], ds[len(ds)-1]
	}
	for _, r := range rows {
		_, mn, mx := span(r)
		lo, hi = math.Min(lo, mn), math.Max(hi, mx)
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 1e-6)))), math.Pow(10, math.Ceil(math.Log10(math.Max(hi, 1e-6))))
	if hi <= lo {
		hi = lo * 10
	}
	xOf := func(v float64) float64 {
		return labelW + barW*(math.Log10(math.Max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	text(&b, float64(width)/2, 20, "middle", "median time per run (log scale, min–max)")
	base := float64(padT + rowH*len(rows))
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", labelW, base, labelW+barW, base)
	for v := lo; v <= hi*1.0001; v *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", xOf(v), padT, xOf(v), base)
		text(&b, xOf(v), base+16, "middle", fmtSeconds(v))
	}
	for i, r := range rows {
		med, mn, mx := span(r)
		y := float64(padT + rowH*i)
		color := "#3b6ea5"
		if r.Baseline == "" && slices.ContainsFunc(rows, func(o Row) bool { return o.Baseline == r.Name }) {
			color = "#a33" // a baseline
		}
		text(&b, labelW-8, y+rowH/2+4, "end", r.Name)
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>`+"\n",
			labelW, y+4, xOf(med)-labelW, rowH-8, color, html.EscapeString(r.Name), fmtSeconds(med))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", xOf(mn), y+rowH/2, xOf(mx), y+rowH/2)
	}
	b.WriteString("</svg>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return true, fmt.Errorf("write chart: %w", err)
	}
	return true, nil
}

// fmtSeconds prints a tick or a time compactly: 10ms, 1s, 100s.
func fmtSeconds(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%gms", math.Round(v*1e6)/1e3)
	}
	return fmt.Sprintf("%gs", math.Round(v*1e3)/1e3)
}
