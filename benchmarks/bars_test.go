package benchmarks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteSummary lists every SPEC §9 bar: verdicts from the results,
// P6 from the scenarios' peak RSS, "not measured" for the rest.
func TestWriteSummary(t *testing.T) {
	dir := t.TempDir()
	results := []Result{
		{Scenario: "snapshot", Date: time.Now(), PeakRSS: 300e6, Bars: []Bar{
			{ID: "P1", Measure: "m", Bar: "≥ 60% of the ceiling", Value: "94%", Met: true},
			{ID: "P1", Measure: "m", Bar: "≥ 30k rows/s", Value: "20k", Met: false, Note: "busiest stage: flush"}}},
		{Scenario: "scaling", PeakRSS: 520e6, Bars: []Bar{{ID: "P2", Bar: "≥ 1.7×", Value: "1.1×"}}},
	}
	if err := WriteSummary(dir, "full", results); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"| P1 | snapshot of 1M todos / 1k lists | ≥ 60% of the ceiling | 94% | met | [snapshot.md](snapshot.md) |",
		"| **NOT met** — busiest stage: flush |",
		"| P0 | a caught-up syncpipe, no source change", "| P3 |", "not measured",
		"≥ 95% of storage's own statement ceiling (decode + probe + op insert) in the same run, two clusters",
		"| P3-large | one 1M-row source transaction |",
		"| P6 | memory (syncpipe process) | RSS < 500 MB through P1–P5 and one 1M-row source transaction | peak P1 300 MB, P2 520 MB | **NOT met**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "\n| P"); n != 10 { // P0, P1 twice, P2, P3, P3-large, P4, P5, P5-streams, P6 once
		t.Errorf("%d bar lines, want 10:\n%s", n, md)
	}
}

func TestBusySince(t *testing.T) {
	if got := busySince(cpuTimes{busy: 10, total: 100}, cpuTimes{busy: 60, total: 200}); got != 0.5 {
		t.Fatalf("busySince = %v, want 0.5", got)
	}
	if got := busySince(cpuTimes{}, cpuTimes{}); got != 0 {
		t.Fatalf("busySince of nothing = %v, want 0", got)
	}
}
