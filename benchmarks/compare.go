package benchmarks

import (
	"fmt"
	"strings"
)

// A comparison run (Harness.Compare) measures every syncpipe configuration
// of P1 and P3 with two binaries in the same run, interleaved, and reports
// for each configuration both medians and their ratio: a change is judged
// against a build of the commit before it on the same machine at the same
// time, not against figures measured on another day.

// compareParams describes a comparison run for a result's parameters.
func (h *Harness) compareParams() string {
	if h == nil || h.Compare == "" {
		return ""
	}
	return fmt.Sprintf("; comparison run: every syncpipe configuration measured with two binaries, interleaved (A B, B A, A B, …) — new = %s, old = %s (rows marked%s)",
		h.Syncpipe, h.Compare, compareSuffix)
}

// compareNote is the table of a comparison run: for every row measured
// with both binaries, the two medians (min–max), the ratio of the medians
// and the ratio of each run's pair. "" if no row was measured twice.
func compareNote(rows []Row, unit string) string {
	byName := map[string]Row{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	perSample := func(s Sample) int64 { return s.Rows }
	var b strings.Builder
	for _, r := range rows {
		old, ok := byName[r.Name+compareSuffix]
		if strings.HasSuffix(r.Name, compareSuffix) || !ok || len(r.Samples) == 0 || len(old.Samples) == 0 {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "New build vs old build (same run, interleaved; %s):\n\n", unit)
			fmt.Fprintln(&b, "| configuration | new: median (min–max) | old: median (min–max) | new / old (medians) | per run, new / old |")
			fmt.Fprintln(&b, "| --- | ---: | ---: | ---: | --- |")
		}
		nm, nlo, nhi := r.rate(perSample)
		om, olo, ohi := old.rate(perSample)
		var pairs []string
		for i := range min(len(r.Samples), len(old.Samples)) {
			pairs = append(pairs, fmt.Sprintf("%.3f", rate(r.Samples[i])/max(rate(old.Samples[i]), 1e-9)))
		}
		fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) | %.0f (%.0f–%.0f) | **%.3f** | %s |\n",
			r.Name, nm, nlo, nhi, om, olo, ohi, nm/max(om, 1e-9), strings.Join(pairs, ", "))
	}
	return strings.TrimRight(b.String(), "\n")
}
