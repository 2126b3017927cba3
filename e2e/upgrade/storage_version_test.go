package upgrade

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// lastStorageV1 is the last commit whose syncpipe writes only storage
// version 1 (the version before storage layout v2).
const lastStorageV1 = "a5b6b7b"

// clientState keeps what the sync client held at its latest complete
// checkpoint, once asked to (a copy per checkpoint costs a few
// milliseconds for 20k rows, so only at the end), and watches that it
// never shrinks.
type clientState struct {
	harness.GrowthWatch
	mu   sync.Mutex
	keep bool
	rows bucketcheck.State
}

func (c *clientState) observe(cp string, rows map[string]map[string]string) {
	c.Observe(cp, rows)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.keep {
		return
	}
	c.rows = bucketcheck.State{}
	for b, rs := range rows {
		c.rows[b] = make(map[string]string, len(rs))
		for k, v := range rs {
			c.rows[b][k] = v
		}
	}
}

// TestStorageVersion1MovesInTheBackground: storage that the previous
// version (storage version 1 only) snapshotted and streamed is moved by
// the current binary to the current storage version through a new group that
// re-snapshots in the background, while a sync client that synced from
// the previous version is served from the version 1 group — its
// checkpoints keep arriving, validated by checksum, and never lose rows,
// as changes stream — until the new group takes over;
// the version 1 group is then retired and its rows are gone, what the
// client holds equals the source, and `syncpipe status` shows the current
// version.
// A second client, new to the current binary, starts its first download
// as the move starts, so that it may span the takeover: its checksums
// validate too, and it ends holding the source.
func TestStorageVersion1MovesInTheBackground(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old := harness.BinaryAt(t, lastStorageV1)
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 20, Todos: 20000, Seed: 47}})

	p := e.StartWith(harness.ProcConfig{Binary: old})
	e.WaitCaughtUp(ctx)
	e.Exec(ctx, `UPDATE todos SET description = 'streamed by the previous version ' || id WHERE id IN (SELECT id FROM todos LIMIT 100)`)
	e.WaitCaughtUp(ctx)
	// A client of the previous version, as in a real upgrade: it holds the
	// version 1 group's data and reconnects to the current binary, which
	// listens on the same address.
	var seen clientState
	client := e.Sync("alice", seen.observe)
	e.WaitFor(ctx, "the client's first checkpoint from the previous version", func() bool { return client.Complete() > 0 })
	if err := p.Stop(); err != nil {
		t.Fatalf("the previous version's syncpipe run: %v", err)
	}
	v1 := e.ActiveGroup(ctx)
	var v1Rows int
	if err := e.Storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe.bucket_data WHERE group_id = $1", v1).Scan(&v1Rows); err != nil || v1Rows == 0 {
		t.Fatalf("the previous version's group %d holds %d ops in bucket_data (%v), want its snapshot", v1, v1Rows, err)
	}

	at := client.Complete()
	e.Start()
	fw := &harness.CheckpointWatch{}
	fresh := e.Sync("bob", fw.Observe)
	e.WaitFor(ctx, "the client's first checkpoint from the current binary", func() bool { return client.Complete() > at })
	gctx, stopGrowing := context.WithCancel(ctx)
	grown := e.GrowTodos(gctx, t)
	served := e.WatchServing(gctx)

	// 20k rows re-snapshot in seconds; a minute bounds a move that never
	// starts.
	mctx, mcancel := context.WithTimeout(ctx, time.Minute)
	defer mcancel()
	latest := bucketstore.CurrentStorageVersion
	e.WaitFor(mctx, fmt.Sprintf("a group of storage version %d to take over", latest), func() bool { return e.ActiveGroup(mctx) > v1 })
	v2 := e.ActiveGroup(ctx)
	var version int
	if err := e.Storage.QueryRow(ctx, "SELECT storage_version FROM syncpipe.groups WHERE id = $1", v2).Scan(&version); err != nil || version != latest {
		t.Fatalf("group %d took over with storage version %d (%v), want %d", v2, version, err, latest)
	}
	want := fmt.Sprintf("storage version 1 → %d: re-snapshot in the background; clients are served from group %d meanwhile", latest, v1)
	if !e.Logged(want) {
		t.Errorf("the log does not say %q", want)
	}
	at = client.Complete()
	e.WaitFor(ctx, "the client to sync from the new group", func() bool { return client.Complete() > at+1 })
	stopGrowing()
	<-grown
	if gaps := <-served; gaps > 0 {
		t.Fatalf("%d times no group was serving during the move", gaps)
	}

	e.WaitFor(ctx, "the version 1 group to be retired and its rows gone", func() bool {
		var state string
		var rows int
		err := e.Storage.QueryRow(ctx, `SELECT g.state,
			(SELECT count(*) FROM syncpipe.bucket_data WHERE group_id = g.id) +
			(SELECT count(*) FROM syncpipe.current_data WHERE group_id = g.id) +
			(SELECT count(*) FROM syncpipe.bucket_parameters WHERE group_id = g.id)
			FROM syncpipe.groups g WHERE g.id = $1`, v1).Scan(&state, &rows)
		return err == nil && state == "TERMINATED" && rows == 0
	})

	// One more change after the load: a checkpoint the client gets whole.
	seen.mu.Lock()
	seen.keep = true
	seen.mu.Unlock()
	e.Exec(ctx, `UPDATE lists SET name = 'after the move' WHERE id = (SELECT id FROM lists ORDER BY id LIMIT 1)`)
	expected := func() bucketcheck.State {
		st, err := bucketcheck.ExpectedTodosGroup(ctx, e.Src, v2)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}()
	var diff error
	e.WaitFor(ctx, "the client to hold the source's data", func() bool {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		diff = bucketcheck.Diff(seen.rows, expected)
		return seen.rows != nil && diff == nil
	})
	e.WaitFor(ctx, "the new client to hold the source's data", fw.Holds(expected))
	e.Converge(ctx, time.Minute, e.Todos(ctx, v2))
	if shrunk := seen.Failures(); len(shrunk) > 0 {
		t.Fatalf("the client saw rows disappear during the move: %v", shrunk)
	}
	if f := client.Failures(); len(f) > 0 {
		t.Fatalf("the sync client saw protocol errors: %v", f)
	}
	if f := fresh.Failures(); len(f) > 0 {
		t.Fatalf("the client new to the current binary saw protocol errors: %v", f)
	}

	code, out, stderr := harness.Run(t, ctx, "status", "--config", e.Config)
	if code != cli.ExitOK {
		t.Fatalf("syncpipe status: exit %d: %s", code, stderr)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == fmt.Sprint(v2) {
			line = strings.Join(f, " ")
			break // the groups' table comes before the snapshot progress
		}
	}
	if !strings.HasPrefix(line, fmt.Sprintf("%d ACTIVE v%d ", v2, latest)) {
		t.Errorf("status does not show group %d ACTIVE with storage version %d:\n%s", v2, latest, out)
	}
	e.Alive()
}
