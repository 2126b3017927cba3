package benchmarks

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestStreamingSmoke runs P3 and P3-large once at a tiny scale through the
// code path of `-scenario streaming`: the decode-only baseline, syncpipe
// children catching up on 1k-row transactions and on one transaction
// larger than the default batch_max_rows (so it is written in pieces), and
// the lag measurement. It asserts what storage holds and what the report
// contains, never a timing.
func TestStreamingSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and builds syncpipe")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := BuildSyncpipe(ctx, dir, raceEnabled)
	if err != nil {
		t.Fatal(err)
	}
	// 25k updates in one transaction: three pieces at the default 10000
	// rows per storage write.
	const todosN, updates, large = 25_000, 2000, 25_000
	var log strings.Builder
	opt := StreamingOptions{Todos: todosN, Lists: 20, Updates: updates, TxnRows: 1000, Runs: 1,
		SteadyRate: 1000, SteadyFor: 2 * time.Second, SteadyTxnRows: 100, LargeUpdates: large,
		Log: &log, Harness: &Harness{Syncpipe: bin, Dir: dir}}
	res, larges, err := runStreaming(ctx, opt)
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Log(log.String())
	// Changes counted and ops stored (one by_list op per updated todo; the
	// baselines store nothing), row by row.
	want := []struct {
		name         string
		changes, ops int64
	}{
		{streamBaseline, updates, 0}, {streamSyncpipe, updates, updates},
		{largeRowName(streamBaseline, opt), large, 0}, {largeRowName(streamSyncpipe, opt), large, large},
	}
	if len(res.Rows) != len(want) {
		t.Fatalf("rows %+v, want %d", res.Rows, len(want))
	}
	for i, w := range want {
		r := res.Rows[i]
		if r.Name != w.name || len(r.Samples) != 1 || r.Samples[0].Rows != w.changes || r.Samples[0].Ops != w.ops {
			t.Errorf("row %d: %q %+v; want %q with one sample of %d changes, %d ops", i, r.Name, r.Samples, w.name, w.changes, w.ops)
		}
	}
	if len(larges) != 1 {
		t.Fatalf("%d large-transaction runs, want 1", len(larges))
	}
	// Written in pieces: at least one storage write per 10000 changes.
	if b := larges[0].Child.Stages.Stage("flush").Batches; b < large/10_000 {
		t.Errorf("the large transaction took %d storage writes, want ≥ %d", b, large/10_000)
	}
	if lr := larges[0]; lr.txnWAL <= 0 || lr.stmts != (large+largeStmtRows-1)/largeStmtRows || !lr.end.After(lr.committed) {
		t.Errorf("large run: WAL %d, %d statements, commit %v, checkpoint %v", lr.txnWAL, lr.stmts, lr.committed, lr.end)
	}
	var ids []string
	for _, b := range res.Bars {
		ids = append(ids, b.ID)
	}
	if strings.Join(ids, " ") != "P3 P3 P3-large P3-large" {
		t.Errorf("bars %v, want P3 throughput and lag, P3-large rate and RSS", ids)
	}
	if res.PeakRSS <= 0 || larges[0].Child.PeakRSS <= 0 {
		t.Errorf("peak RSS: scenario %d, large transaction %d", res.PeakRSS, larges[0].Child.PeakRSS)
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	for _, s := range []string{"P3-large, one 25k-row transaction", "P3-large stage-time summary", "of syncpipe streaming |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, md.String())
		}
	}
}
