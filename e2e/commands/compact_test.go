package commands

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// TestCompactWhileSyncing runs `syncpipe compact` against a running
// `syncpipe run` while the source keeps changing and a client follows the
// stream: the client sees no checksum failure, a client that syncs after
// compaction holds the source, storage keeps one op per live row and
// bucket plus a CLEAR, and status shows the run.
func TestCompactWhileSyncing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 5, Todos: 200, Seed: 5}})
	want := e.Todos(ctx, 1)
	e.Start()
	e.WaitCaughtUp(ctx)
	early := &harness.CheckpointWatch{}
	c1 := e.Sync("alice", early.Observe)
	e.WaitFor(ctx, "the first client's first checkpoint", func() bool { return c1.Complete() > 0 })

	// Every todo updated 30 times, then compaction while the updates go on.
	// (Caught up every few rounds: the stream writes only a row's last
	// change of a batch, and every round should leave ops.)
	for round := range 30 {
		e.Exec(ctx, fmt.Sprintf(`UPDATE todos SET description = 'round %d ' || id`, round))
		if round%3 == 2 {
			e.WaitCaughtUp(ctx)
		}
	}
	e.WaitCaughtUp(ctx)
	churnDone := make(chan struct{})
	churnErr := make(chan error, 1)
	go func() {
		defer close(churnDone)
		// Not e.Exec: it may fail the test, which only the test's
		// goroutine may do; the error is reported below.
		for round := 0; ctx.Err() == nil && round < 20; round++ {
			if _, err := e.Src.Exec(ctx, fmt.Sprintf(`UPDATE todos SET completed = NOT completed, description = 'during %d ' || id
				WHERE id IN (SELECT id FROM todos ORDER BY random() LIMIT 20)`, round)); err != nil {
				churnErr <- err
				return
			}
		}
	}()
	out := runOK(t, ctx, e, "compact", "--batch-ops", "500", "--max-busy", "0.5")
	t.Logf("compact while changing: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "group 1: ") || !strings.Contains(out, "ops moved") {
		t.Fatalf("compact printed %q", out)
	}
	// 30 updates of 200 todos leave thousands of superseded ops, so a
	// nonzero amount, in KiB at least.
	if m := reclaimedRE.FindStringSubmatch(out); m == nil || m[1] == "0" || m[2] == "B" {
		t.Fatalf("compact printed no bytes reclaimed: %q", out)
	}
	<-churnDone
	select {
	case err := <-churnErr:
		t.Fatalf("update the source while compacting: %v", err)
	default:
	}
	e.WaitCaughtUp(ctx)
	// A last update of every todo: each row's latest op is then in one run
	// at the end of its bucket, and everything before it compacts away.
	e.Exec(ctx, `UPDATE todos SET description = 'final ' || id`)
	e.WaitCaughtUp(ctx)
	out = runOK(t, ctx, e, "compact")
	t.Logf("compact when quiet: %s", strings.TrimSpace(out))
	e.Converge(ctx, time.Minute, want)

	// Every bucket holds one PUT per live row and at most one CLEAR.
	current := want()
	rows, err := e.Storage.Query(ctx, `SELECT bucket_name, count(*) FILTER (WHERE op = 1), count(*) FILTER (WHERE op <> 1),
		count(*) FILTER (WHERE op = 4) FROM syncpipe.bucket_ops WHERE group_id = 1 GROUP BY bucket_name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var bucket string
		var puts, others, clears int
		if err := rows.Scan(&bucket, &puts, &others, &clears); err != nil {
			t.Fatal(err)
		}
		if others > 1 || clears > 1 || puts != len(current[bucket]) {
			t.Errorf("bucket %s after compaction: %d PUTs and %d other ops (%d CLEARs), want %d PUTs and at most one CLEAR",
				bucket, puts, others, clears, len(current[bucket]))
		}
	}
	rows.Close()

	late := &harness.CheckpointWatch{}
	c2 := e.Sync("alice", late.Observe)
	e.WaitFor(ctx, "a client syncing after compaction to hold the source", late.Holds(current))
	e.WaitFor(ctx, "the client syncing throughout to hold it too", early.Holds(current))
	for name, c := range map[string]*harness.SyncClient{"throughout": c1, "after": c2} {
		if f := c.Failures(); len(f) > 0 {
			t.Errorf("the client syncing %s saw protocol errors: %v", name, f)
		}
	}
	status := runOK(t, ctx, e, "status")
	if !strings.Contains(status, "group 1 last compacted") || !reclaimedRE.MatchString(status) {
		t.Errorf("status shows no compaction, or not the bytes it reclaimed:\n%s", status)
	}
	e.Alive()
}

// reclaimedRE finds the bytes a compaction reclaimed as compact and status
// print them (describeCompaction): the amount and its unit.
var reclaimedRE = regexp.MustCompile(`, ([0-9.]+) (B|[KMGTPE]iB) reclaimed`)

// TestBackgroundCompaction: with replication.compaction.interval set, a
// running syncpipe compacts by itself — counted on /metrics (ops and bytes
// reclaimed), recorded for status — while a client following the stream validates every
// checkpoint.
func TestBackgroundCompaction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := harness.FreeAddr(t)
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 3, Todos: 60, Seed: 6},
		Env: []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + addr, "SYNCPIPE_REPLICATION__COMPACTION__INTERVAL=300ms",
			"SYNCPIPE_REPLICATION__COMPACTION__BATCH_OPS=50"},
	})
	want := e.Todos(ctx, 1)
	e.Start()
	e.WaitCaughtUp(ctx)
	w := &harness.CheckpointWatch{}
	c := e.Sync("alice", w.Observe)
	for round := range 12 {
		e.Exec(ctx, fmt.Sprintf(`UPDATE todos SET description = 'round %d ' || id`, round))
		e.WaitCaughtUp(ctx)
	}
	e.WaitFor(ctx, "background compaction on /metrics", func() bool {
		ss := harness.Scrape(ctx, addr)
		moved, _ := harness.Sample(ss, "syncpipe_compaction_ops_total", "kind", "moved")
		cleared, _ := harness.Sample(ss, "syncpipe_compaction_ops_total", "kind", "cleared")
		reclaimed, _ := harness.Sample(ss, "syncpipe_compaction_reclaimed_bytes_total")
		// A completed run too: the ops count as a run goes, and status
		// shows a compaction once one has completed.
		runs, _ := harness.Sample(ss, "syncpipe_compaction_runs_total")
		return moved > 0 && cleared > 0 && reclaimed > 0 && runs > 0
	})
	// Read from storage on scrape and cached for storageGaugeCache: the
	// group's data has been there since the snapshot.
	e.WaitFor(ctx, "the group's storage bytes on /metrics", func() bool {
		n, _ := harness.Sample(harness.Scrape(ctx, addr), "syncpipe_storage_bytes", "group", "1", "storage_version", fmt.Sprint(bucketstore.CurrentStorageVersion))
		return n > 0
	})
	e.Converge(ctx, time.Minute, want)
	e.WaitFor(ctx, "the client to hold the source", w.Holds(want()))
	if f := c.Failures(); len(f) > 0 {
		t.Fatalf("the client saw protocol errors while storage was compacted: %v", f)
	}
	if status := runOK(t, ctx, e, "status"); !strings.Contains(status, "group 1 last compacted") {
		t.Errorf("status shows no compaction:\n%s", status)
	}
	e.Alive()
}
