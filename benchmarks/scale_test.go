package benchmarks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestScaleSmoke runs the scale scenario once at a tiny scale through the
// code path of `go run ./benchmarks/cmd/bench -scenario scale`: two sizes,
// each with its snapshot child to the first checkpoint, storage's size, a
// drain from an API child, the 1k-row catch-up and the steady lag, then
// the report files. It asserts counts and that every figure was measured,
// never a timing. One cluster only, the topology of the bar on the first
// checkpoint: each configuration costs ≈ 15 s of fixed waits (a slot
// moved on, the lag's load), and two clusters' catch-up and lag are
// streaming's own code, which TestStreamingSmoke runs in both.
func TestScaleSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 4*time.Minute)
	const lists, updates = 20, 2000
	sizes := []int{2000, 10_000}
	var log strings.Builder
	res, runs, err := runScale(ctx, ScaleOptions{Sizes: sizes, Lists: lists, Topologies: []string{OneCluster},
		Workers: 2, ChunkRows: 1000, Updates: updates, TxnRows: 1000, SteadyRate: 5000, SteadyFor: 2 * time.Second, SteadyTxnRows: 100,
		Runs: 1, DrainRuns: 1, SharedBuffers: "128MB", Log: &log, Harness: h})
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Log(log.String())
	if len(runs) != 2 || runs[0].size != sizes[0] || runs[1].size != sizes[1] {
		t.Fatalf("%d runs: want one per size, smallest first", len(runs))
	}
	for _, r := range runs {
		rows := int64(r.size + lists + 1)
		switch {
		case r.p1.Rows != rows || r.snapshotDone.Before(r.slotCreated) || r.firstCheckpoint.Before(r.snapshotDone) || r.slotCreated.Before(r.launched):
			t.Errorf("%s: P1 %d rows, times %v %v %v %v: want %d rows, in order", r.label(), r.p1.Rows, r.launched, r.slotCreated, r.snapshotDone, r.firstCheckpoint, rows)
		case r.storageBytes <= 0 || len(r.relations) == 0:
			t.Errorf("%s: storage %d bytes, relations %v", r.label(), r.storageBytes, r.relations)
		case r.p1StorageCPU <= 0 || r.p3StorageCPU <= 0 || r.p1PostgresCPU <= 0:
			t.Errorf("%s: storage backends' CPU P1 %v, P3 %v, Postgres %v: want all measured", r.label(), r.p1StorageCPU, r.p3StorageCPU, r.p1PostgresCPU)
		case r.p3.Rows != updates || r.p3.Duration <= 0 || r.p3Misses < 0:
			t.Errorf("%s: P3 %+v, misses %d", r.label(), r.p3, r.p3Misses)
		case len(r.lags) == 0 || r.achieved <= 0:
			t.Errorf("%s: %d lag samples at %.0f changes/s", r.label(), len(r.lags), r.achieved)
		case len(r.drains) != 1 || r.drains[0].Ops != rows:
			t.Errorf("%s: drains %+v: want one of %d ops", r.label(), r.drains, rows)
		}
	}
	if len(res.Rows) != 8 || len(res.Bars) != 6 || res.PeakRSS <= 0 {
		t.Errorf("%d rows, %d bars, peak RSS %d: want 4 parts × 2 sizes, 6 bars and the children's RSS", len(res.Rows), len(res.Bars), res.PeakRSS)
	}
	out := filepath.Join(h.Dir, "results")
	if err := res.Save(out); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "scale.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| 10k todos, one cluster | ", "10k todos, one cluster: P4 drain", "snapshot done → first checkpoint, one cluster", "bucket_data"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("scale.md lacks %q:\n%s", s, md)
		}
	}
}

// TestScaleReport: the bars compare the largest size with the smallest on
// the binary under test, and a comparison run gets the new/old ratios of
// the figures that are not rates.
func TestScaleReport(t *testing.T) {
	base := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	mk := func(n int, suffix string, p1, toCheckpoint, p3 time.Duration, p99 time.Duration, bytes int64) *scaleRun {
		rows := int64(n + 1001)
		return &scaleRun{size: n, topology: OneCluster, suffix: suffix, rows: rows,
			launched: base, slotCreated: base.Add(time.Second), snapshotDone: base.Add(p1 - toCheckpoint), firstCheckpoint: base.Add(p1),
			p1: Sample{Duration: p1, Rows: rows}, storageBytes: bytes * rows,
			p3: Sample{Duration: p3, Rows: 100_000}, p3StorageCPU: 2 * time.Second, p3Misses: 50_000,
			lags: []time.Duration{10 * time.Millisecond, p99}, achieved: 4990,
			drains: []Sample{{Duration: time.Duration(rows) * time.Microsecond * 6, Rows: rows, Ops: rows}}}
	}
	// 1M: 10 s; 10M: 110 s (90 % of 1M's rows/s), 12 s from snapshot done
	// to the first checkpoint, P3 4 s vs 4.9 s (82 %), 600 bytes per row.
	runs := []*scaleRun{
		mk(1_000_000, "", 10*time.Second, 2*time.Second, 4*time.Second, 50*time.Millisecond, 500),
		mk(1_000_000, compareSuffix, 10*time.Second, 2*time.Second, 4*time.Second, 50*time.Millisecond, 840),
		mk(10_000_000, "", 110*time.Second, 12*time.Second, 4900*time.Millisecond, 300*time.Millisecond, 600),
		mk(10_000_000, compareSuffix, 200*time.Second, 80*time.Second, 6*time.Second, 900*time.Millisecond, 840),
	}
	opt := ScaleOptions{Sizes: []int{1_000_000, 10_000_000}, Topologies: []string{OneCluster}, SteadyRate: 5000}
	got := map[string]bool{}
	for _, b := range scaleBars(opt, runs) {
		got[b.Measure] = b.Met
	}
	want := map[string]bool{
		"P1 process start → first checkpoint, one cluster": true,
		"snapshot done → first checkpoint, one cluster":    false,
		"P3 replication lag, one cluster":                  false,
		"P3 1k-row-transaction throughput, one cluster":    true,
		"P4 drain, one cluster":                            true,
		"storage bytes per source row":                     false,
	}
	if len(got) != len(want) {
		t.Errorf("bars %v, want %v", got, want)
	}
	for m, met := range want {
		if g, ok := got[m]; !ok || g != met {
			t.Errorf("bar %q: met %v (present %v), want %v", m, g, ok, met)
		}
	}
	note := scaleCompareNote(runs)
	for _, s := range []string{"| 10M todos, one cluster | snapshot done → first checkpoint (s) | 12.00 | 80.00 | **0.150** |",
		"| 1M todos, one cluster | storage bytes per source row | 500.00 | 840.00 | **0.595** |"} {
		if !strings.Contains(note, s) {
			t.Errorf("compare note lacks %q:\n%s", s, note)
		}
	}
	if table := scaleTable(runs); !strings.Contains(table, "| 10M todos, one cluster [old] | ") {
		t.Errorf("table lacks the old build's row:\n%s", table)
	}
}
