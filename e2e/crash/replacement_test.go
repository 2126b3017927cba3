package crash

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestSlotLostThreeTimes drops the serving group's replication slot three
// times in a row under one `syncpipe run` process while the source grows
// and a sync client polls the API. Each loss must start a replacement
// group that re-snapshots while the old one serves; the client must never
// see fewer rows than at its previous checkpoint (no empty or partial
// view while groups are replaced), checksums must hold throughout, and
// storage must end equal to the source.
func TestSlotLostThreeTimes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 20, Todos: 20000, Seed: 5}})
	e.Start()
	e.WaitCaughtUp(ctx)
	var w harness.GrowthWatch
	client := e.Sync("alice", w.Observe)
	e.WaitFor(ctx, "the client's first checkpoint", func() bool { return client.Complete() > 0 })
	gctx, stopGrowing := context.WithCancel(ctx)
	grown := e.GrowTodos(gctx, t)
	served := e.WatchServing(gctx)

	for loss := 1; loss <= 3; loss++ {
		g := e.ActiveGroup(ctx)
		var slot string
		if err := e.Storage.QueryRow(ctx, "SELECT slot_name FROM syncpipe.groups WHERE id = $1", g).Scan(&slot); err != nil {
			t.Fatal(err)
		}
		harness.DropSlot(ctx, t, e.Src, slot)
		e.WaitFor(ctx, fmt.Sprintf("a group replacing group %d to serve", g), func() bool { return e.ActiveGroup(ctx) > g })
		seen := client.Complete()
		e.WaitFor(ctx, "the client to sync from the new group", func() bool { return client.Complete() > seen+1 })
	}
	stopGrowing()
	<-grown
	if gaps := <-served; gaps > 0 {
		t.Fatalf("%d times no group was serving: a group was retired before its replacement took over", gaps)
	}
	if t.Failed() {
		return
	}
	e.WaitCaughtUp(ctx)
	active := e.ActiveGroup(ctx)
	e.WaitFor(ctx, "the replaced groups to be retired", func() bool {
		var others int
		err := e.Storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe.bucket_ops WHERE group_id <> $1", active).Scan(&others)
		return err == nil && others == 0
	})
	e.Converge(ctx, time.Minute, e.Todos(ctx, active))
	if f := w.Failures(); len(f) > 0 {
		t.Fatalf("the client saw data disappear while groups were replaced: %v", f)
	}
	if f := client.Failures(); len(f) > 0 {
		t.Fatalf("the sync client saw protocol errors: %v", f)
	}
	e.Alive()
}

// TestPublicationDroppedAndRecreated drops the publication under a running
// `syncpipe run` while the source keeps changing, then creates it again.
// While it is gone, status and /healthz must show the error with its
// remedy; once it is back, replication must recover by itself (a new group
// re-snapshots, since the changes made meanwhile were never published)
// and storage must equal the source.
func TestPublicationDroppedAndRecreated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 10, Todos: 3000, Seed: 6}})
	e.Start()
	e.WaitCaughtUp(ctx)
	status := func() string {
		_, out, _ := harness.Run(t, ctx, "status", "--config", e.Config)
		return out
	}

	e.Exec(ctx, `DROP PUBLICATION syncpipe`)
	e.Exec(ctx, `UPDATE todos SET description = 'while no publication ' || id WHERE id IN (SELECT id FROM todos LIMIT 50)`)
	e.WaitFor(ctx, "syncpipe status to show the publication error", func() bool {
		return strings.Contains(status(), "CREATE PUBLICATION")
	})
	_, health := harness.Get(ctx, e.API, "/healthz", "")
	if !strings.Contains(health, "degraded") || !strings.Contains(health, "publication") {
		t.Fatalf("/healthz while the publication is gone: %s", health)
	}
	if _, m := harness.Get(ctx, e.API, "/metrics", ""); !strings.Contains(m, `syncpipe_replication_errors_total{kind="fatal"`) {
		t.Fatalf("/metrics does not count the fatal error:\n%s", m)
	}

	e.Exec(ctx, `CREATE PUBLICATION syncpipe FOR TABLE lists, todos`)
	e.Exec(ctx, `UPDATE todos SET description = 'after the publication came back ' || id WHERE id IN (SELECT id FROM todos LIMIT 50)`)
	e.WaitFor(ctx, "a new group to serve", func() bool { return e.ActiveGroup(ctx) > 1 })
	e.WaitCaughtUp(ctx)
	active := e.ActiveGroup(ctx)
	e.Converge(ctx, time.Minute, e.Todos(ctx, active))
	e.WaitFor(ctx, "/healthz to be ok again", func() bool {
		_, health := harness.Get(ctx, e.API, "/healthz", "")
		return strings.Contains(health, `"status":"ok"`)
	})

	// A publication that stops publishing a table is the same event.
	e.Exec(ctx, `ALTER PUBLICATION syncpipe DROP TABLE todos`)
	e.Exec(ctx, `UPDATE todos SET description = 'while todos were not published ' || id WHERE id IN (SELECT id FROM todos LIMIT 50)`)
	e.WaitFor(ctx, "syncpipe status to show the publication error", func() bool {
		return strings.Contains(status(), "ALTER PUBLICATION syncpipe ADD TABLE")
	})
	e.Exec(ctx, `ALTER PUBLICATION syncpipe ADD TABLE todos`)
	e.WaitFor(ctx, "a new group to serve", func() bool { return e.ActiveGroup(ctx) > active })
	e.WaitCaughtUp(ctx)
	active = e.ActiveGroup(ctx)
	e.Converge(ctx, time.Minute, e.Todos(ctx, active))
	e.Alive()
}

// TestForcedStreamFailuresLeaveNoWalsenders fails the stream 20 times —
// its walsender terminated, or its other source connections, which ends
// the stream while the walsender is healthy — and checks that every
// failed stream's replication connection was closed: the source never has
// more walsenders than groups, and replication still converges.
func TestForcedStreamFailuresLeaveNoWalsenders(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// No garbage collection in the child: a connection left open would
	// otherwise be closed by a finalizer at some point, hiding the leak.
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 10, Todos: 2000, Seed: 8}, Env: []string{"GOGC=off"}})
	e.Start()
	e.WaitCaughtUp(ctx)
	// The slot of this test's source database (the cluster is shared by
	// the package's tests).
	walsender := func() (pid int) {
		_ = e.Src.QueryRow(ctx, `SELECT coalesce(max(active_pid), 0) FROM pg_replication_slots
			WHERE slot_name LIKE 'syncpipe_%' AND database = current_database()`).Scan(&pid)
		return pid
	}
	for i := range 20 {
		old := walsender()
		if i%2 == 0 {
			e.Exec(ctx, `SELECT pg_terminate_backend($1)`, old)
		} else {
			// The stream's catalog connection: the stream fails at its next
			// check, with its walsender still healthy.
			e.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'syncpipe' AND backend_type = 'client backend'
				  AND pid <> pg_backend_pid()`)
		}
		e.WaitFor(ctx, fmt.Sprintf("failure %d: a new walsender", i+1), func() bool {
			p := walsender()
			return p != 0 && p != old
		})
		// The stream works again before the next failure.
		e.Exec(ctx, `UPDATE todos SET description = $1 || id WHERE id IN (SELECT id FROM todos LIMIT 5)`, fmt.Sprintf("failure %d ", i))
		e.WaitCaughtUp(ctx)
		if n := walsenders(ctx, e); n > 1 {
			t.Fatalf("after forced stream failure %d the source has %d walsenders for one group", i+1, n)
		}
	}
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	n := walsenders(ctx, e)
	var groups int
	if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.groups WHERE state IN ('ACTIVE', 'PROCESSING')`).Scan(&groups); err != nil {
		t.Fatal(err)
	}
	if n > groups {
		t.Fatalf("after 20 forced stream failures the source has %d walsenders for %d groups", n, groups)
	}
	e.Alive()
}
