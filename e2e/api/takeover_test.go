package api

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestFirstDownloadSpansTakeover: a client's first download of many ops
// is under way, the client reading slowly (paused after its first data
// line until the new group has snapshotted, with a small receive buffer:
// the server's writes wait for it), when a rules change (SIGHUP) makes a
// new group re-snapshot and take over, and the old group's storage is
// cleared, while the source keeps changing. The client must never get checkpoint_complete for data it
// could not have whole — every checksum validates — and ends holding
// exactly the source, in the new group's buckets. (The old group's reads
// after its clearing began happen or not by timing: the test makes the
// download span the takeover; the syncapi package's tests force them.)
func TestFirstDownloadSpansTakeover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 20, Todos: 20000, Seed: 47}})
	p := e.Start()
	e.WaitCaughtUp(ctx)
	old := e.ActiveGroup(ctx)
	phase("caught up")

	w := &harness.CheckpointWatch{}
	client := harness.NewSyncClient(e.API, e.Token("alice"), w.Observe)
	paused, resume := client.PauseAtFirstData()
	cctx, stopClient := context.WithCancel(context.Background())
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		client.Run(cctx)
	}()
	t.Cleanup(func() {
		resume()
		stopClient()
		<-clientDone
	})
	select {
	case <-paused:
	case <-ctx.Done():
		t.Fatal("the client read no data line")
	}
	phase("the client paused after its first data line")
	if client.Complete() != 0 {
		t.Fatalf("the client completed %d checkpoints before its first data line", client.Complete())
	}

	gctx, stopGrowing := context.WithCancel(ctx)
	defer stopGrowing()
	grown := e.GrowTodos(gctx, t)
	e.WriteFile("rules.yaml", "# version 2\n"+todos.Rules)
	p.Signal(syscall.SIGHUP)
	// The client reads on from when the new group has snapshotted: the
	// rest of its download, superseded by the old group's checkpoints
	// every second or so, races the new group's first checkpoint and the
	// old group's retirement (its slot dropped, its storage cleared).
	e.WaitFor(ctx, "the new group's snapshot", func() bool {
		var n int
		err := e.Storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe.groups WHERE id > $1 AND snapshot_done", old).Scan(&n)
		return err == nil && n > 0
	})
	resume()
	phase("the new group snapshotted; the client resumed")
	e.WaitFor(ctx, "a new group to take over", func() bool { return e.ActiveGroup(ctx) > old })
	next := e.ActiveGroup(ctx)
	phase("the new group took over")
	e.WaitFor(ctx, "the old group to be retired and its rows gone", func() bool {
		var state string
		var rows int
		err := e.Storage.QueryRow(ctx, `SELECT g.state,
			(SELECT count(*) FROM syncpipe.bucket_data2 WHERE group_id = g.id) +
			(SELECT count(*) FROM syncpipe.bucket_parameters WHERE group_id = g.id)
			FROM syncpipe.groups g WHERE g.id = $1`, old).Scan(&state, &rows)
		return err == nil && state == "TERMINATED" && rows == 0
	})
	phase("the old group retired")
	stopGrowing()
	<-grown

	e.Exec(ctx, `UPDATE lists SET name = 'after the takeover' WHERE id = (SELECT id FROM lists ORDER BY id LIMIT 1)`)
	e.WaitFor(ctx, "the client to hold the source in the new group's buckets", w.Holds(e.Todos(ctx, next)()))
	phase("the client holds the source")
	if f := client.Failures(); len(f) > 0 {
		t.Fatalf("the client saw protocol errors (checksum mismatches): %v", f)
	}
	if pr := w.Problems(); len(pr) > 0 {
		t.Fatalf("the client saw checkpoints across groups: %v", pr)
	}
	if w.Seen(next) == 0 {
		t.Fatalf("the client completed no checkpoint of group %d", next)
	}
	e.Alive()
}
