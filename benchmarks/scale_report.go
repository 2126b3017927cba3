package benchmarks

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The scale scenario's report: a table of every figure per configuration
// (median over its runs), the largest relations, the new/old ratios of a
// comparison run, and issue 47's bars, judged on the binary under test.

// scaleBytesBar is the bar on storage bytes per source row: 40 % below the
// 840 issue 47 measured at 10M todos.
const scaleBytesBar = 504

// scaleConfig is one configuration's runs: a size, a topology, a binary.
type scaleConfig struct {
	name string
	runs []*scaleRun
}

// scaleConfigs groups runs by configuration, in the order they ran.
func scaleConfigs(runs []*scaleRun) []scaleConfig {
	var out []scaleConfig
	for _, r := range runs {
		name := r.label() + r.suffix
		i := slices.IndexFunc(out, func(c scaleConfig) bool { return c.name == name })
		if i < 0 {
			out = append(out, scaleConfig{name: name})
			i = len(out) - 1
		}
		out[i].runs = append(out[i].runs, r)
	}
	return out
}

// med is the median of f over the configuration's runs.
func (c scaleConfig) med(f func(*scaleRun) float64) float64 {
	xs := make([]float64, len(c.runs))
	for i, r := range c.runs {
		xs[i] = f(r)
	}
	return median(xs)
}

// The figures of one run.
func (r *scaleRun) p1Rate() float64 { return rate(r.p1) }
func (r *scaleRun) snapshotRate() float64 {
	return float64(r.rows) / max(r.snapshotDone.Sub(r.slotCreated), time.Nanosecond).Seconds()
}
func (r *scaleRun) startToDone() float64 { return r.snapshotDone.Sub(r.launched).Seconds() }
func (r *scaleRun) doneToCheckpoint() float64 {
	return r.firstCheckpoint.Sub(r.snapshotDone).Seconds()
}
func (r *scaleRun) perRow(d time.Duration) float64 {
	return float64(d) / float64(time.Microsecond) / float64(max(r.rows, 1))
}
func (r *scaleRun) bytesPerRow() float64 { return float64(r.storageBytes) / float64(max(r.rows, 1)) }
func (r *scaleRun) perChange(n float64) float64 {
	return n / float64(max(r.p3.Rows, 1))
}
func (r *scaleRun) p3StorageUs() float64 {
	return r.perChange(float64(r.p3StorageCPU) / float64(time.Microsecond))
}
func (r *scaleRun) lag(q float64) float64 { return percentile(slices.Clone(r.lags), q).Seconds() }
func (r *scaleRun) p4Rate() float64 {
	xs := make([]float64, len(r.drains))
	for i, d := range r.drains {
		xs[i] = rate(d)
	}
	return median(xs)
}

// scaleTable is every figure of every configuration.
func scaleTable(runs []*scaleRun) string {
	var b strings.Builder
	fmt.Fprintln(&b, "Every figure per configuration (median of its runs). P1 rows/s: source rows (todos, lists, the marker row) from process start to the first published checkpoint; "+
		"the snapshot itself from the slot's creation to \"snapshot done\". CPU: Postgres = both clusters' processes over P1; storage = the storage database's backends. "+
		"Buffer misses, over P1 per source row and over P3's catch-up per change: blocks storage's relations read from outside shared buffers (pg_statio_user_tables: heap + index + TOAST + TOAST index, every fork) "+
		"less the pages they grew by (shown as \"+ new\": PostgreSQL 15 counts a page a relation is extended by as read); "+
		"after the semicolon the storage database's statements' shared_blks_read (pg_stat_statements, which counts an extension as written). Storage: every relation of the storage schema after P1, per source row.")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| configuration | P1 rows/s | snapshot rows/s | start → snapshot done | snapshot done → first checkpoint | P1 CPU µs per row: Postgres / storage backends / syncpipe | P1 misses per row | storage bytes per row | P3 changes/s | storage CPU µs per change | P3 misses per change | lag p50 / p99 (changes/s) | P4 ops/s |")
	fmt.Fprintln(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, c := range scaleConfigs(runs) {
		// Misses, pages grown and shared_blks_read (where counted) per
		// row or change.
		misses := func(n float64, f func(r *scaleRun) (misses, grown, shared int64)) string {
			m := c.med(func(r *scaleRun) float64 { v, _, _ := f(r); return float64(v) / n })
			g := c.med(func(r *scaleRun) float64 { _, v, _ := f(r); return float64(v) / n })
			if _, _, sh := f(c.runs[0]); sh < 0 {
				return fmt.Sprintf("%.2f (+%.2f new)", m, g)
			}
			return fmt.Sprintf("%.2f (+%.2f new; %.2f)", m, g, c.med(func(r *scaleRun) float64 { _, _, v := f(r); return float64(v) / n }))
		}
		p1io := func(r *scaleRun) (int64, int64, int64) { return r.p1Misses, r.p1Grown, r.p1SharedRead }
		p3io := func(r *scaleRun) (int64, int64, int64) { return r.p3Misses, r.p3Grown, r.p3SharedRead }
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.1f s | %.1f s | %.1f / %.1f / %.1f | %s | %.0f | %.0f | %.1f | %s | %.1f / %.1f ms (%.0f) | %.0f |\n",
			c.name, c.med((*scaleRun).p1Rate), c.med((*scaleRun).snapshotRate), c.med((*scaleRun).startToDone), c.med((*scaleRun).doneToCheckpoint),
			c.med(func(r *scaleRun) float64 { return r.perRow(r.p1PostgresCPU) }), c.med(func(r *scaleRun) float64 { return r.perRow(r.p1StorageCPU) }),
			c.med(func(r *scaleRun) float64 { return r.perRow(r.p1.SyncpipeCPU) }),
			misses(float64(c.runs[0].rows), p1io),
			c.med((*scaleRun).bytesPerRow), c.med(func(r *scaleRun) float64 { return rate(r.p3) }), c.med((*scaleRun).p3StorageUs),
			misses(float64(max(c.runs[0].p3.Rows, 1)), p3io),
			1000*c.med(func(r *scaleRun) float64 { return r.lag(0.5) }), 1000*c.med(func(r *scaleRun) float64 { return r.lag(0.99) }),
			c.med(func(r *scaleRun) float64 { return r.achieved }), c.med((*scaleRun).p4Rate))
	}
	return strings.TrimRight(b.String(), "\n")
}

// relationsNote lists each configuration's largest relations after P1
// (of its first run).
func relationsNote(runs []*scaleRun) string {
	var b strings.Builder
	fmt.Fprintln(&b, "Storage after P1, the largest relations (tables: heap, TOAST and maps; indexes apart):")
	fmt.Fprintln(&b)
	for _, c := range scaleConfigs(runs) {
		r := c.runs[0]
		var parts []string
		for _, rel := range r.relations {
			parts = append(parts, fmt.Sprintf("%s (%s) %s", rel.name, rel.kind, fmtBytes(rel.bytes)))
		}
		fmt.Fprintf(&b, "- %s: %s in all; %s\n", c.name, fmtBytes(r.storageBytes), strings.Join(parts, ", "))
	}
	return strings.TrimRight(b.String(), "\n")
}

// scaleCompareNote is a comparison run's new/old ratios of the figures
// that are not rates (compareNote has those), per configuration measured
// with both binaries.
func scaleCompareNote(runs []*scaleRun) string {
	configs := scaleConfigs(runs)
	figures := []struct {
		name string
		f    func(*scaleRun) float64
	}{
		{"snapshot done → first checkpoint (s)", (*scaleRun).doneToCheckpoint},
		{"P1 Postgres CPU µs per row", func(r *scaleRun) float64 { return r.perRow(r.p1PostgresCPU) }},
		{"storage bytes per source row", (*scaleRun).bytesPerRow},
		{"P3 storage CPU µs per change", (*scaleRun).p3StorageUs},
		{"P3 buffer misses per change", func(r *scaleRun) float64 { return r.perChange(float64(r.p3Misses)) }},
		{"lag p99 (ms)", func(r *scaleRun) float64 { return 1000 * r.lag(0.99) }},
	}
	var b strings.Builder
	for _, c := range configs {
		i := slices.IndexFunc(configs, func(o scaleConfig) bool { return o.name == c.name+compareSuffix })
		if strings.HasSuffix(c.name, compareSuffix) || i < 0 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintln(&b, "New build vs old build, the other figures (medians; lower is better for all):")
			fmt.Fprintln(&b)
			fmt.Fprintln(&b, "| configuration | figure | new | old | new / old |")
			fmt.Fprintln(&b, "| --- | --- | ---: | ---: | ---: |")
		}
		for _, f := range figures {
			n, o := c.med(f.f), configs[i].med(f.f)
			ratio := "—" // of nothing (no misses in either)
			if o > 0 {
				ratio = fmt.Sprintf("**%.3f**", n/o)
			}
			fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %s |\n", c.name, f.name, n, o, ratio)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// scaleBars are issue 47's bars, judged on the binary under test: the
// largest size against the smallest in the same run.
func scaleBars(opt ScaleOptions, runs []*scaleRun) []Bar {
	if len(opt.Sizes) == 0 {
		return nil
	}
	lo, hi := opt.Sizes[0], opt.Sizes[len(opt.Sizes)-1]
	find := func(n int, topo string) (scaleConfig, bool) {
		for _, c := range scaleConfigs(runs) {
			if r := c.runs[0]; r.size == n && r.topology == topo && r.suffix == "" {
				return c, true
			}
		}
		return scaleConfig{}, false
	}
	var bars []Bar
	ratioBar := func(measure, unit string, share float64, small, large scaleConfig, f func(*scaleRun) float64) Bar {
		s, l := small.med(f), large.med(f)
		return Bar{ID: "Scale", Measure: measure + ", " + topologyLabel(large.runs[0].topology),
			Bar:   fmt.Sprintf("%s ≥ %.0f%% of %s's", size(hi), 100*share, size(lo)),
			Value: fmt.Sprintf("%s %.0f %s = %.0f%% of %s's %.0f", size(hi), l, unit, 100*l/max(s, 1e-9), size(lo), s), Met: l >= share*s}
	}
	var bytesRow float64
	for _, topo := range opt.Topologies {
		large, ok := find(hi, topo)
		if !ok {
			continue
		}
		bytesRow = max(bytesRow, large.med((*scaleRun).bytesPerRow))
		if small, ok := find(lo, topo); ok && lo != hi {
			b := ratioBar("P1 process start → first checkpoint", "rows/s", 0.8, small, large, (*scaleRun).p1Rate)
			b.Value += fmt.Sprintf(" (the snapshot itself: %.0f%%)", 100*large.med((*scaleRun).snapshotRate)/max(small.med((*scaleRun).snapshotRate), 1e-9))
			bars = append(bars, b)
		}
		if topo == OneCluster {
			d := large.med((*scaleRun).doneToCheckpoint)
			bars = append(bars, Bar{ID: "Scale", Measure: "snapshot done → first checkpoint, one cluster", Bar: fmt.Sprintf("≤ 10 s at %s", size(hi)),
				Value: fmt.Sprintf("%s: %.1f s", size(hi), d), Met: d <= 10})
		}
		p99, achieved := large.med(func(r *scaleRun) float64 { return r.lag(0.99) }), large.med(func(r *scaleRun) float64 { return r.achieved })
		bars = append(bars, Bar{ID: "Scale", Measure: "P3 replication lag, " + topologyLabel(topo), Bar: fmt.Sprintf("p99 < 250 ms at %s, %d changes/s steady", size(hi), opt.SteadyRate),
			Value: fmt.Sprintf("%s: p99 %.1f ms at %.0f changes/s", size(hi), 1000*p99, achieved),
			Met:   p99 < 0.25 && achieved >= 0.95*float64(opt.SteadyRate)})
		if small, ok := find(lo, topo); ok && lo != hi {
			bars = append(bars, ratioBar("P3 1k-row-transaction throughput", "changes/s", 0.8, small, large, func(r *scaleRun) float64 { return rate(r.p3) }),
				ratioBar("P4 drain", "ops/s", 0.9, small, large, (*scaleRun).p4Rate))
		}
	}
	if bytesRow > 0 {
		bars = append(bars, Bar{ID: "Scale", Measure: "storage bytes per source row", Bar: fmt.Sprintf("≤ %d at %s (40%% below 840)", scaleBytesBar, size(hi)),
			Value: fmt.Sprintf("%s: %.0f (the larger of the topologies)", size(hi), bytesRow), Met: bytesRow <= scaleBytesBar})
	}
	return bars
}
