package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// growthWatch checks, for a source that only grows, that the rows a client
// holds at complete checkpoints never shrink: a client must never be told
// that data it had is gone (an empty or partial checkpoint while a group
// is replaced).
type growthWatch struct {
	mu     sync.Mutex
	last   int
	shrunk []string
}

func (w *growthWatch) observe(cp string, rows map[string]map[string]string) {
	n := countRows(rows, "global[") + countRows(rows, "by_list[")
	w.mu.Lock()
	defer w.mu.Unlock()
	if n < w.last {
		w.shrunk = append(w.shrunk, fmt.Sprintf("checkpoint %s: %d rows after %d", cp, n, w.last))
	}
	w.last = n
}

func (w *growthWatch) failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.shrunk...)
}

// grow inserts todos until ctx ends: a source that only grows. A failed
// insert fails the test at once.
func grow(ctx context.Context, t *testing.T, uri string) <-chan struct{} {
	conn := pgtest.Connect(t, uri)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ctx.Err() == nil; n++ {
			_, err := conn.Exec(ctx, `INSERT INTO todos (id, list_id, description)
				SELECT gen_random_uuid(), id, 'grown ' || $1::text FROM lists ORDER BY random() LIMIT 2`, fmt.Sprint(n))
			if err != nil && ctx.Err() == nil {
				t.Errorf("grow the source: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Millisecond):
			}
		}
	}()
	return done
}

// watchServing samples storage every 10 ms until ctx ends and then
// reports how many samples found no ACTIVE group with a checkpoint: while
// groups are replaced, the old one must serve until the new one takes over.
func (e *streamEnv) watchServing(ctx context.Context) <-chan int {
	out := make(chan int, 1)
	go func() {
		gaps := 0
		for ctx.Err() == nil {
			var n int
			err := e.storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.groups WHERE state = 'ACTIVE' AND last_checkpoint IS NOT NULL`).Scan(&n)
			if err == nil && n == 0 {
				gaps++
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		out <- gaps
	}()
	return out
}

// dropSlot terminates the walsender streaming from slot and drops it,
// retrying while syncpipe reconnects in between.
func dropSlot(ctx context.Context, t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	// syncpipe takes the slot back as soon as its connection is gone, so
	// the drop must come between its holder's exit (the terminate waits
	// for it, up to 5 s) and the reconnect; a reconnect that won the race
	// is terminated again.
	for attempt := 0; ; attempt++ {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "is active") || attempt > 200 {
			t.Fatalf("drop slot %s: %v", slot, err)
		}
	}
}

// TestSlotLostThreeTimes drops the serving group's replication slot three
// times in a row under one `syncpipe run` process while the source grows
// and a sync client polls the API. Each loss must start a replacement
// group that re-snapshots while the old one serves; the client must never
// see fewer rows than at its previous checkpoint (no empty or partial
// view while groups are replaced), checksums must hold throughout, and
// storage must end equal to the source.
func TestSlotLostThreeTimes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 20, Todos: 20000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitCaughtUp(ctx)
	var w growthWatch
	client := newSyncClient(e.api, e.token("alice"), w.observe)
	cctx, stopClient := context.WithCancel(ctx)
	defer stopClient()
	go client.run(cctx)
	e.waitFor(ctx, "the client's first checkpoint", func() bool { return client.complete() > 0 })
	gctx, stopGrowing := context.WithCancel(ctx)
	grown := grow(gctx, t, e.srcURI)
	served := e.watchServing(gctx)

	for loss := 1; loss <= 3; loss++ {
		g := e.activeGroup(ctx)
		var slot string
		if err := e.storage.QueryRow(ctx, "SELECT slot_name FROM syncpipe.groups WHERE id = $1", g).Scan(&slot); err != nil {
			t.Fatal(err)
		}
		dropSlot(ctx, t, e.src, slot)
		e.waitFor(ctx, fmt.Sprintf("a group replacing group %d to serve", g), func() bool { return e.activeGroup(ctx) > g })
		seen := client.complete()
		e.waitFor(ctx, "the client to sync from the new group", func() bool { return client.complete() > seen+1 })
	}
	stopGrowing()
	<-grown
	if gaps := <-served; gaps > 0 {
		t.Fatalf("%d times no group was serving: a group was retired before its replacement took over", gaps)
	}
	if t.Failed() {
		return
	}
	e.waitCaughtUp(ctx)
	active := e.activeGroup(ctx)
	e.waitFor(ctx, "the replaced groups to be retired", func() bool {
		var others int
		err := e.storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe.bucket_data WHERE group_id <> $1", active).Scan(&others)
		return err == nil && others == 0
	})
	e.converge(ctx, time.Minute, e.todos(ctx, active))
	if f := w.failures(); len(f) > 0 {
		t.Fatalf("the client saw data disappear while groups were replaced: %v", f)
	}
	if f := client.failures(); len(f) > 0 {
		t.Fatalf("the sync client saw protocol errors: %v", f)
	}
	e.alive()
}

// TestPublicationDroppedAndRecreated drops the publication under a running
// `syncpipe run` while the source keeps changing, then creates it again.
// While it is gone, status and /healthz must show the error with its
// remedy; once it is back, replication must recover by itself (a new group
// re-snapshots, since the changes made meanwhile were never published)
// and storage must equal the source.
func TestPublicationDroppedAndRecreated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 10, Todos: 3000, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitCaughtUp(ctx)

	e.exec(ctx, `DROP PUBLICATION syncpipe`)
	e.exec(ctx, `UPDATE todos SET description = 'while no publication ' || id WHERE id IN (SELECT id FROM todos LIMIT 50)`)
	var status string
	e.waitFor(ctx, "syncpipe status to show the publication error", func() bool {
		_, status, _ = runCLI(t, "status", "--config", e.config)
		return strings.Contains(status, "CREATE PUBLICATION")
	})
	health := e.get(ctx, "/healthz")
	if !strings.Contains(health, "degraded") || !strings.Contains(health, "publication") {
		t.Fatalf("/healthz while the publication is gone: %s", health)
	}
	if m := e.get(ctx, "/metrics"); !strings.Contains(m, `syncpipe_replication_errors_total{kind="fatal"`) {
		t.Fatalf("/metrics does not count the fatal error:\n%s", m)
	}

	e.exec(ctx, `CREATE PUBLICATION syncpipe FOR TABLE lists, todos`)
	e.exec(ctx, `UPDATE todos SET description = 'after the publication came back ' || id WHERE id IN (SELECT id FROM todos LIMIT 50)`)
	e.waitFor(ctx, "a new group to serve", func() bool { return e.activeGroup(ctx) > 1 })
	e.waitCaughtUp(ctx)
	active := e.activeGroup(ctx)
	e.converge(ctx, time.Minute, e.todos(ctx, active))
	e.waitFor(ctx, "/healthz to be ok again", func() bool { return strings.Contains(e.get(ctx, "/healthz"), `"status":"ok"`) })

	// A publication that stops publishing a table is the same event.
	e.exec(ctx, `ALTER PUBLICATION syncpipe DROP TABLE todos`)
	e.exec(ctx, `UPDATE todos SET description = 'while todos were not published ' || id WHERE id IN (SELECT id FROM todos LIMIT 50)`)
	e.waitFor(ctx, "syncpipe status to show the publication error", func() bool {
		_, status, _ = runCLI(t, "status", "--config", e.config)
		return strings.Contains(status, "ALTER PUBLICATION syncpipe ADD TABLE")
	})
	e.exec(ctx, `ALTER PUBLICATION syncpipe ADD TABLE todos`)
	e.waitFor(ctx, "a new group to serve", func() bool { return e.activeGroup(ctx) > active })
	e.waitCaughtUp(ctx)
	active = e.activeGroup(ctx)
	e.converge(ctx, time.Minute, e.todos(ctx, active))
	e.alive()
}

// get fetches a path of the sync API.
func (e *streamEnv) get(ctx context.Context, path string) string {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.api+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestForcedStreamFailuresLeaveNoWalsenders fails the stream 20 times —
// its walsender terminated, or its other source connections, which ends
// the stream while the walsender is healthy — and checks that every
// failed stream's replication connection was closed: the source never has
// more walsenders than groups, and replication still converges.
func TestForcedStreamFailuresLeaveNoWalsenders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// No garbage collection in the child: a connection left open would
	// otherwise be closed by a finalizer at some point, hiding the leak.
	e := newStreamEnv(t, envOptions{rules: todos.Rules, env: []string{"GOGC=off"}})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 10, Todos: 2000, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitCaughtUp(ctx)
	walsender := func() (pid int) {
		_ = e.src.QueryRow(ctx, `SELECT coalesce(max(active_pid), 0) FROM pg_replication_slots WHERE slot_name LIKE 'syncpipe_%'`).Scan(&pid)
		return pid
	}
	for i := range 20 {
		old := walsender()
		if i%2 == 0 {
			e.exec(ctx, `SELECT pg_terminate_backend($1)`, old)
		} else {
			// The stream's catalog connection: the stream fails at its next
			// check, with its walsender still healthy.
			e.exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = 'syncpipe' AND backend_type = 'client backend'
				  AND pid <> pg_backend_pid()`)
		}
		e.waitFor(ctx, fmt.Sprintf("failure %d: a new walsender", i+1), func() bool {
			p := walsender()
			return p != 0 && p != old
		})
		// The stream works again before the next failure.
		e.exec(ctx, `UPDATE todos SET description = $1 || id WHERE id IN (SELECT id FROM todos LIMIT 5)`, fmt.Sprintf("failure %d ", i))
		e.waitCaughtUp(ctx)
		if n := e.walsenders(ctx); n > 1 {
			t.Fatalf("after forced stream failure %d the source has %d walsenders for one group", i+1, n)
		}
	}
	e.waitCaughtUp(ctx)
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	walsenders := e.walsenders(ctx)
	var groups int
	if err := e.storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.groups WHERE state IN ('ACTIVE', 'PROCESSING')`).Scan(&groups); err != nil {
		t.Fatal(err)
	}
	if walsenders > groups {
		t.Fatalf("after 20 forced stream failures the source has %d walsenders for %d groups", walsenders, groups)
	}
	e.alive()
}

// walsenders counts the source's walsender processes.
func (e *streamEnv) walsenders(ctx context.Context) int {
	e.t.Helper()
	var n int
	if err := e.src.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}
