package benchmarks

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// runLoadCompare is the load scenario of a comparison run
// (Harness.Compare): the whole measurement — fresh clusters, data, a
// `syncpipe run --role all` child, clients and load — once per binary per
// run, the binaries interleaved (A B, B A, …). The result is the new
// build's first run's, with a row per binary (a sample per run), a table
// of the headline figures of both (loadCompareNote), each run's report,
// and the bar judged on the new build's run of median p99; then, with
// FirstSyncPairs, the first sync measured in pairs (firstSyncPairs).
func runLoadCompare(ctx context.Context, opt LoadOptions) (Result, error) {
	runs := max(opt.Runs, 1)
	vs := opt.Harness.variants()
	figs := map[string][]loadFigures{}
	var first Result
	var reports []string
	for k := range runs {
		for _, v := range interleaved(vs, k) {
			o := opt
			o.Harness = v.h
			res, fig, err := runLoad(ctx, o)
			if err != nil {
				return res, fmt.Errorf("load%s, run %d: %w", v.suffix, k+1, err)
			}
			if v.suffix == "" && len(figs[""]) == 0 {
				first = res
			}
			figs[v.suffix] = append(figs[v.suffix], fig)
			reports = append(reports, fmt.Sprintf("Run %d, %s build:\n\n%s", k+1, buildName(v.suffix), loadReport(fig)))
		}
	}
	var pairs map[string][]time.Duration
	if opt.FirstSyncPairs > 0 {
		var err error
		if pairs, err = firstSyncPairs(ctx, opt, vs); err != nil {
			return first, err
		}
	}
	res := first
	res.Params += fmt.Sprintf("; %d run(s) per binary, each on fresh clusters", runs) + opt.Harness.compareParams()
	name := res.Rows[0].Name
	res.Rows = nil
	for _, v := range vs {
		row := Row{Name: name + v.suffix}
		for _, f := range figs[v.suffix] {
			row.Samples = append(row.Samples, Sample{Duration: f.elapsed, Rows: f.committed, Ops: f.ops, PeakRSS: f.peakRSS})
		}
		res.Rows = append(res.Rows, row)
	}
	news := figs[""]
	byP99 := slices.Clone(news)
	slices.SortFunc(byP99, func(a, b loadFigures) int {
		return cmp.Compare(p5LatencyOf(a.lat.total).p99, p5LatencyOf(b.lat.total).p99)
	})
	res.Bars = []Bar{loadBar(byP99[len(byP99)/2])}
	res.PeakRSS = 0
	for _, f := range news {
		res.PeakRSS = max(res.PeakRSS, f.peakRSS)
	}
	// The first run's report is replaced by every run's; its stage-time
	// summary of the new build's child stays.
	head := []string{loadCompareNote(news, figs[compareSuffix])}
	if n := firstSyncNote(opt, pairs); n != "" {
		head = append(head, n)
	}
	res.Notes = append(append(head, reports...), res.Notes[1:]...)
	return res, nil
}

func buildName(suffix string) string {
	if suffix == "" {
		return "new"
	}
	return "old"
}

// loadFigure is a headline figure of a load run, for the comparison
// table.
type loadFigure struct {
	name, unit  string
	lowerBetter bool
	of          func(loadFigures) float64
}

var loadFigureList = []loadFigure{
	{"commit → checkpoint_complete p50", "ms", true, func(f loadFigures) float64 { return ms(p5LatencyOf(f.lat.total).p50) }},
	{"commit → checkpoint_complete p99", "ms", true, func(f loadFigures) float64 { return ms(p5LatencyOf(f.lat.total).p99) }},
	{"changes/s committed", "", false, func(f loadFigures) float64 { return float64(f.committed) / f.elapsed.Seconds() }},
	{"arrivals/s delivered (client, txn)", "", false, func(f loadFigures) float64 { return float64(len(f.lat.total)) / f.elapsed.Seconds() }},
	{"syncpipe CPU per committed change", "µs", true, func(f loadFigures) float64 {
		return float64(f.cpu.syncpipe.Microseconds()) / float64(max(f.committed, 1))
	}},
	{"first sync of all clients", "ms", true, func(f loadFigures) float64 { return ms(f.firstSync) }},
	{"live memory per idle connection", "KiB", true, func(f loadFigures) float64 { return float64(f.perIdle()) / 1024 }},
	{"peak RSS", "MiB", true, func(f loadFigures) float64 { return float64(f.peakRSS) / (1 << 20) }},
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

// loadCompareNote is the comparison table of the load scenario: per
// headline figure, both builds' medians (min–max), the ratio of the
// medians and each run's ratio, new / old. Unlike compareNote's rates,
// some figures are better lower; the table says which.
func loadCompareNote(news, olds []loadFigures) string {
	var b strings.Builder
	b.WriteString("New build vs old build (same run, interleaved; each binary's whole load run):\n\n")
	b.WriteString("| figure | better | new: median (min–max) | old: median (min–max) | new / old (medians) | per run, new / old |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | --- |\n")
	for _, fg := range loadFigureList {
		nv, ov := figureValues(news, fg.of), figureValues(olds, fg.of)
		if len(nv) == 0 || len(ov) == 0 {
			continue
		}
		better := "higher"
		if fg.lowerBetter {
			better = "lower"
		}
		name := fg.name
		if fg.unit != "" {
			name += " (" + fg.unit + ")"
		}
		var pairs []string
		for i := range min(len(nv), len(ov)) {
			pairs = append(pairs, fmt.Sprintf("%.3f", nv[i]/max(ov[i], 1e-9)))
		}
		nm, om := median(nv), median(ov)
		fmt.Fprintf(&b, "| %s | %s | %.1f (%.1f–%.1f) | %.1f (%.1f–%.1f) | **%.3f** | %s |\n", name, better,
			nm, slices.Min(nv), slices.Max(nv), om, slices.Min(ov), slices.Max(ov), nm/max(om, 1e-9), strings.Join(pairs, ", "))
	}
	return strings.TrimRight(b.String(), "\n")
}

func figureValues(fs []loadFigures, of func(loadFigures) float64) []float64 {
	out := make([]float64, len(fs))
	for i, f := range fs {
		out[i] = of(f)
	}
	return out
}
