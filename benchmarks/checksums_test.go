package benchmarks

import (
	"testing"
	"time"
)

// TestChecksumsSmoke runs the P5 scenario at a tiny scale, on bucket
// definitions and on Sync Streams: it must
// complete in all three modes (change records on, off, and on in a
// syncpipe child), every client must complete every checkpoint, with
// change records a checkpoint costs at most one checksum query per changed
// bucket, and the child's peak RSS is reported. No timing is asserted.
func TestChecksumsSmoke(t *testing.T) {
	for _, streams := range []bool{false, true} {
		t.Run(map[bool]string{false: "bucket definitions", true: "sync streams"}[streams], func(t *testing.T) {
			checksumsSmoke(t, streams)
		})
	}
}

// checksumsSmoke is TestChecksumsSmoke on bucket definitions or, with
// streams, on Sync Streams (clients subscribe to each of their lists).
func checksumsSmoke(t *testing.T, streams bool) {
	ctx, h := smokeHarness(t, 5*time.Minute)
	opt := ChecksumsOptions{GlobalRows: 2000, RowBytes: 200, Clients: 5, ListsPerUser: 20, TodosPerList: 1,
		Ticks: 3, Warmup: 1, TodosPerTick: 1, Harness: h, Streams: streams}
	res, figs, err := runChecksums(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 3 || len(res.Rows) != 3 || len(res.Bars) != 1 {
		t.Fatalf("%d modes, %d rows, %d bars; want 3, 3, 1", len(figs), len(res.Rows), len(res.Bars))
	}
	if !figs[2].mode.child || figs[2].peakRSS <= 0 || res.PeakRSS != figs[2].peakRSS {
		t.Errorf("child mode %+v: peak RSS %d, result %d", figs[2].mode, figs[2].peakRSS, res.PeakRSS)
	}
	for _, f := range figs {
		if len(f.ticks) != opt.Ticks {
			t.Fatalf("%s: %d measured checkpoints, want %d", f.mode.name, len(f.ticks), opt.Ticks)
		}
		for i, tk := range f.ticks {
			if len(tk.complete) != opt.Clients || len(tk.diff) != opt.Clients {
				t.Errorf("%s, checkpoint %d: %d diffs and %d completes, want %d each", f.mode.name, i, len(tk.diff), len(tk.complete), opt.Clients)
			}
			if !f.mode.off && tk.queries > int64(tk.changed) {
				t.Errorf("change records on, checkpoint %d: %d checksum queries for %d changed buckets", i, tk.queries, tk.changed)
			}
		}
	}
	t.Log(p5Report(figs))
}
