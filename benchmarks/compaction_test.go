package benchmarks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestCompactionSmoke runs P8 on a small data set: the drain after
// compaction receives one op per row (plus CLEARs) instead of one per
// update, and the report compares it with the drain before.
func TestCompactionSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	res, err := RunCompaction(ctx, CompactionOptions{Rows: 40, Updates: 12, Runs: 1, Log: &log,
		NewDatabase: func(context.Context, string) (string, error) { return pgtest.NewDB(t), nil }})
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Log(log.String())
	if len(res.Rows) != 2 || res.Rows[1].Baseline != res.Rows[0].Name {
		t.Fatalf("rows %+v", res.Rows)
	}
	before, after := res.Rows[0].Samples[0].Ops, res.Rows[1].Samples[0].Ops
	if before < 40*12 || after > 40+1+2 || len(res.Bars) != 1 || !res.Bars[0].Met {
		t.Fatalf("ops drained: %d before, %d after compaction; bars %+v", before, after, res.Bars)
	}
}
