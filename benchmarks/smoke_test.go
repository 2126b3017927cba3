package benchmarks

import (
	"context"
	"testing"
	"time"
)

// smokeHarness is what a scenario's smoke test starts from: skipped in
// -short mode (it starts PostgreSQL), a context bounded by limit and a
// harness with syncpipe built (with -race when the test runs with it).
func smokeHarness(t *testing.T, limit time.Duration) (context.Context, *Harness) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL and builds syncpipe; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	dir := t.TempDir()
	bin, err := BuildSyncpipe(ctx, dir, raceEnabled)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, &Harness{Syncpipe: bin, Dir: dir}
}
