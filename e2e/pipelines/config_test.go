package pipelines

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRunHonoursBucketstorePipeline runs `syncpipe run` with a declared
// bucketstore pipeline whose settings differ from the defaults — its own
// publication and slot prefix, only the lists table, small snapshot chunks
// and stream batches — and checks each one took effect.
func TestRunHonoursBucketstorePipeline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 40, Todos: 400, Seed: 11},
		Top: `pipelines:
  - name: main
    source: {publication: main_pub, slot_prefix: main_slot_}
    tables: [lists]
    stages: {chunk_rows: 7, batch_max_rows: 50}
`,
	})
	e.Start()
	e.WaitCaughtUp(ctx)
	var pubs, slots int
	if err := e.Src.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_publication WHERE pubname = 'main_pub'),
		(SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'main\_slot\_%')`).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs != 1 || slots != 1 {
		t.Fatalf("publication main_pub: %d, slots main_slot_…: %d; want the pipeline's source settings used", pubs, slots)
	}
	// Only lists: no todos buckets.
	lists := func() bucketcheck.State {
		st := e.Todos(ctx, 1)()
		for b := range st {
			if strings.Contains(b, "by_list[") {
				delete(st, b)
			}
		}
		return st
	}
	e.Converge(ctx, time.Minute, lists)

	// A transaction of 5000 new lists is many stream batches of 50 (pieces
	// are at least one decoded segment, 1024 changes): storage holds it
	// part-written for a while. An observer polls for that every 2 ms
	// while the transaction is replicated; it waits for nothing.
	done := make(chan struct{})
	partial := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(2 * time.Millisecond) // the polling interval
		defer tick.Stop()
		seen := false
		for {
			var n int
			if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.groups WHERE stream_txn_lsn IS NOT NULL`).Scan(&n); err == nil && n > 0 {
				seen = true
			}
			select {
			case <-done:
				partial <- seen
				return
			case <-tick.C:
			}
		}
	}()
	e.Exec(ctx, `INSERT INTO lists (id, name, owner_id) SELECT gen_random_uuid(), 'bulk ' || i, 'u' FROM generate_series(1, 5000) i`)
	e.WaitCaughtUp(ctx)
	close(done)
	e.Converge(ctx, time.Minute, lists)
	if !<-partial {
		t.Error("a 5000-row transaction was never stored in pieces: stages.batch_max_rows 50 was not applied")
	}
	e.StopAll()
	// The snapshot read 40 lists in chunks of 7 (the stage-time summary at exit).
	var batches int
	for _, line := range strings.Split(e.TailLogs(1<<20), `\n`) {
		if i := strings.Index(line, "read   source"); i >= 0 {
			fmt.Sscan(strings.Fields(line[i:])[3], &batches)
		}
	}
	if batches < 40/7 {
		t.Errorf("the snapshot read %d chunks; want ≥ %d with stages.chunk_rows 7", batches, 40/7)
	}
}
