package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestReloadOnSIGHUP: a running `syncpipe run` gets a changed rules file
// and SIGHUP while sync clients follow /sync/stream and the source keeps
// changing. Without a restart, a reprocessing group snapshots and streams
// the new rules in the background while the old group keeps serving,
// takes over once caught up (ACTIVE), and the old group is retired: its
// slot dropped and all its storage cleared.
//
// Clients must not notice more than new bucket names: one client streams
// throughout, from group 1's buckets to group 2's, every checkpoint
// holding one group's buckets only, never going back; one reconnects
// (its token expires, so the server ends each connection at a line
// boundary) while group 2 is being processed; one is offline across the
// switch and resumes with group 1's positions after group 1 is gone.
// Every checkpoint's checksums validate, and every client ends holding
// exactly what the source holds, in group 2's buckets.
func TestReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 10, Todos: 10000, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	c := e.start()
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	state := func(id int) (s string) {
		_ = e.storage.QueryRow(ctx, "SELECT state FROM syncpipe.groups WHERE id = $1", id).Scan(&s)
		return s
	}
	e.waitFor(ctx, "group 1 ACTIVE", func() bool { return state(1) == "ACTIVE" })
	var slot1 string
	if err := e.storage.QueryRow(ctx, "SELECT slot_name FROM syncpipe.groups WHERE id = 1").Scan(&slot1); err != nil {
		t.Fatal(err)
	}

	// Before the switch: alice follows the stream (until the end of the
	// test), the source changes, and alice validates a checkpoint holding
	// exactly the source in group 1's buckets.
	aw := &switchWatch{}
	alice := newSyncClient(e.api, e.token("alice"), aw.observe)
	actx, stopAlice := context.WithCancel(ctx)
	defer stopAlice()
	go alice.run(actx)
	e.exec(ctx, `UPDATE todos SET description = 'before the switch ' || id, completed = NOT completed
		WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 100)`)
	e.exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 10)`)
	e.waitFor(ctx, "alice to hold the source in group 1's buckets", aw.holds(e.todos(ctx, 1)()))
	phase("alice holds the source in group 1's buckets")

	// bob and carol sync group 1 on connections that end when their
	// short-lived tokens expire.
	bw, cw := &switchWatch{}, &switchWatch{}
	bob := newSyncClient(e.api, "", bw.observe)
	carol := newSyncClient(e.api, "", cw.observe)
	e.connectUntilExpiry(ctx, bob, "bob", "before the switch")
	e.connectUntilExpiry(ctx, carol, "carol", "before the switch")
	if bw.seen(1) == 0 || cw.seen(1) == 0 {
		t.Fatalf("bob and carol saw %d and %d checkpoints of group 1 before the switch", bw.seen(1), cw.seen(1))
	}

	// The source changes from now until after the switch.
	gctx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	churned, churnDone := reloadChurn(gctx, t, e.srcURI, state)
	served := e.watchServing(gctx)
	e.waitFor(ctx, "changes on the source before the reload", func() bool { return churned.count("") >= 3 })
	seen := aw.seen(1)
	e.waitFor(ctx, "alice to validate a checkpoint with them", func() bool { return aw.seen(1) > seen })

	// Same buckets, new rules text: a new rules version.
	e.writeRules("# version 2\n" + todos.Rules)
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	phase("SIGHUP")
	e.waitFor(ctx, "a reprocessing group", func() bool { return state(2) != "" })
	if s := state(2); s != "PROCESSING" {
		t.Fatalf("group 2 is %s as soon as it is seen: the switch is too quick to test changes and reconnects during it; load more rows", s)
	}
	// bob reconnects while group 2 is being processed, resuming with group
	// 1's positions.
	e.connectUntilExpiry(ctx, bob, "bob", "during the switch")
	e.waitFor(ctx, "group 2 ACTIVE and group 1 retired", func() bool {
		return state(2) == "ACTIVE" && state(1) == "TERMINATED"
	})
	phase("group 2 ACTIVE, group 1 TERMINATED")
	if n := churned.count("PROCESSING"); n == 0 {
		t.Fatal("no source change was committed while group 2 was being processed")
	}

	// Everything group 1 stored is cleared (bucketstore clearTables, and
	// its op id claims), its checkpoint reset and its slot dropped.
	var left string
	wctx, stopWaiting := context.WithTimeout(ctx, time.Minute)
	defer stopWaiting()
	defer func() {
		if t.Failed() && left != "" {
			t.Logf("group 1 still has %s", left)
		}
	}()
	e.waitFor(wctx, "group 1's storage cleared and its slot dropped", func() bool {
		left = e.groupLeftovers(ctx, 1, slot1)
		return left == ""
	})
	phase("group 1 cleared")

	// After the switch: more changes, validated by alice in group 2's
	// buckets.
	after := churned.count("ACTIVE")
	e.waitFor(ctx, "changes on the source after group 1 was retired", func() bool { return churned.count("ACTIVE") >= after+5 })
	seen = aw.seen(2)
	e.waitFor(ctx, "alice to validate a checkpoint of group 2 with them", func() bool { return aw.seen(2) > seen })
	stopChurn()
	<-churnDone
	if gaps := <-served; gaps > 0 {
		t.Fatalf("%d times no group was serving: group 1 stopped before group 2 took over", gaps)
	}
	e.exec(ctx, `UPDATE todos SET description = 'after the switch ' || id WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 100)`)
	e.exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 10)`)
	e.exec(ctx, `INSERT INTO lists (id, name, owner_id) VALUES (gen_random_uuid(), 'after the switch', 'x')`)
	e.exec(ctx, `INSERT INTO todos (id, list_id, description)
		SELECT gen_random_uuid(), id, 'in a new list' FROM lists WHERE name = 'after the switch'`)
	e.waitCaughtUp(ctx)
	want := e.todos(ctx, 2)()
	e.converge(ctx, time.Minute, func() bucketcheck.State { return want })
	e.waitFor(ctx, "alice to hold the source in group 2's buckets", aw.holds(want))
	phase("alice holds the source in group 2's buckets")

	// bob (who may have moved to group 2 on his connection during the
	// switch) and carol (offline since before it, holding group 1's
	// positions) reconnect and catch up.
	bctx, stopOthers := context.WithCancel(ctx)
	defer stopOthers()
	bob.token, carol.token = e.token("bob"), e.token("carol")
	go bob.run(bctx)
	go carol.run(bctx)
	e.waitFor(ctx, "bob to hold the source in group 2's buckets", bw.holds(want))
	e.waitFor(ctx, "carol to hold the source in group 2's buckets", cw.holds(want))
	phase("bob and carol hold it too")

	// Checked before any client is stopped: a stream cut by the client
	// may end inside a line.
	for _, cl := range []struct {
		name string
		c    *syncClient
		w    *switchWatch
	}{{"alice", alice, aw}, {"bob", bob, bw}, {"carol", carol, cw}} {
		if f := cl.c.failures(); len(f) > 0 {
			t.Errorf("%s saw protocol errors (checksum failures): %v", cl.name, f)
		}
		if p := cl.w.problems(); len(p) > 0 {
			t.Errorf("%s saw checkpoints across groups: %v", cl.name, p)
		}
		if cl.w.seen(2) == 0 {
			t.Errorf("%s never completed a checkpoint of group 2", cl.name)
		}
	}
	// The clients' connections alternate between what the SDKs ask for
	// (BSON, zstd) and NDJSON with gzip: the API counts bytes of both.
	ss := scrape(ctx, e.api)
	for _, enc := range [][2]string{{"application/vnd.powersync.bson-stream", "zstd"}, {"application/x-ndjson", "gzip"}} {
		if n, _ := sample(ss, "syncpipe_sync_sent_bytes_total", "content_type", enc[0], "content_encoding", enc[1]); n <= 0 {
			t.Errorf("/metrics: %v bytes sent as %s with %s, want > 0", n, enc[0], enc[1])
		}
	}
	if aw.seen(1) < 2 || aw.seen(2) < 2 {
		t.Errorf("alice completed %d checkpoints of group 1 and %d of group 2; want changes validated in both", aw.seen(1), aw.seen(2))
	}
	t.Logf("checkpoints completed: alice %d of group 1, %d of group 2; bob %d, %d; carol %d, %d; source transactions before/during/after: %d/%d/%d",
		aw.seen(1), aw.seen(2), bw.seen(1), bw.seen(2), cw.seen(1), cw.seen(2), churned.count(""), churned.count("PROCESSING"), churned.count("ACTIVE"))
	e.alive()
	if !e.logged("SIGHUP: reading the sync rules again") {
		t.Fatal("the reload was not logged")
	}
}

// switchWatch follows the complete checkpoints one sync client sees while
// groups switch: which group's buckets each holds (bucket names are
// "<group>#…"), and the rows of the latest one.
type switchWatch struct {
	mu     sync.Mutex
	groups map[int]int // group → complete checkpoints holding its buckets only
	last   int         // group of the latest complete checkpoint
	bad    []string    // checkpoints mixing groups, without buckets, or back to an older group
	rows   bucketcheck.State
	n      int // complete checkpoints seen
}

func (w *switchWatch) observe(cp string, rows map[string]map[string]string) {
	gs := map[int]bool{}
	copied := bucketcheck.State{}
	for name, rs := range rows {
		g, _, _ := strings.Cut(name, "#")
		n, err := strconv.Atoi(g)
		if err != nil {
			n = -1
		}
		gs[n] = true
		if len(rs) > 0 {
			m := make(map[string]string, len(rs))
			for k, v := range rs {
				m[k] = v
			}
			copied[name] = m
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.groups == nil {
		w.groups = map[int]int{}
	}
	w.rows = copied
	w.n++
	if len(gs) != 1 {
		ids := make([]int, 0, len(gs))
		for g := range gs {
			ids = append(ids, g)
		}
		sort.Ints(ids)
		w.bad = append(w.bad, fmt.Sprintf("checkpoint %s holds buckets of groups %v", cp, ids))
		return
	}
	for g := range gs {
		if g < w.last {
			w.bad = append(w.bad, fmt.Sprintf("checkpoint %s holds group %d's buckets after group %d's", cp, g, w.last))
		}
		w.groups[g]++
		w.last = g
	}
}

// seen is how many complete checkpoints held group g's buckets only.
func (w *switchWatch) seen(g int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.groups[g]
}

func (w *switchWatch) problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

// holds returns a condition: the latest complete checkpoint held exactly
// want (compared once per checkpoint).
func (w *switchWatch) holds(want bucketcheck.State) func() bool {
	compared, equal := -1, false
	return func() bool {
		w.mu.Lock()
		rows, n := w.rows, w.n // rows is replaced, never modified
		w.mu.Unlock()
		if n != compared {
			compared, equal = n, rows != nil && bucketcheck.Diff(rows, want) == nil
		}
		return equal
	}
}

// connectUntilExpiry syncs cl on connections with a 3 s token, which the
// server ends when the token expires (at a line boundary: ending them from
// the client could cut a line), until one of them completed a checkpoint.
func (e *streamEnv) connectUntilExpiry(ctx context.Context, cl *syncClient, sub, when string) {
	e.t.Helper()
	for attempt := 1; ; attempt++ {
		seen := cl.complete()
		// No connection of cl is running: the previous one has ended.
		cl.token = e.tokenTTL(sub, 3*time.Second)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cl.once(ctx)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			e.t.Fatalf("%s %s: the connection did not end: %v", sub, when, ctx.Err())
		}
		if f := cl.failures(); len(f) > 0 {
			e.t.Fatalf("%s %s: the sync client saw protocol errors: %v", sub, when, f)
		}
		if cl.complete() > seen {
			return
		}
		if attempt == 20 {
			e.t.Fatalf("%s %s: 20 connections completed no checkpoint", sub, when)
		}
	}
}

// tokenTTL mints a client JWT with lifetime ttl through `syncpipe token`.
func (e *streamEnv) tokenTTL(sub string, ttl time.Duration) string {
	e.t.Helper()
	code, stdout, stderr := runCLI(e.t, "token", "--config", e.config, "--sub", sub, "--ttl", ttl.String())
	if code != 0 {
		e.t.Fatalf("syncpipe token: exit %d: %s", code, stderr)
	}
	return strings.TrimSpace(stdout)
}

// groupLeftovers describes what storage and the source still hold for a
// retired group ("" when nothing): rows of every per-group table, a
// checkpoint, or its slot.
func (e *streamEnv) groupLeftovers(ctx context.Context, group int, slot string) string {
	var left []string
	for _, q := range []struct{ table, where string }{
		{"bucket_data", "group_id = $1"},
		{"bucket_parameters", "group_id = $1"},
		{"bucket_changes", "group_id = $1"},
		{"current_data", "group_id = $1"},
		{"snapshot_ranges", "source_table_id IN (SELECT id FROM syncpipe.source_tables WHERE group_id = $1)"},
		{"source_tables", "group_id = $1"},
		{"op_reservations", "group_id = $1"},
		{"groups", "id = $1 AND (last_checkpoint IS NOT NULL OR state <> 'TERMINATED')"},
	} {
		var n int
		if err := e.storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe."+q.table+" WHERE "+q.where, group).Scan(&n); err != nil {
			left = append(left, fmt.Sprintf("%s: %v", q.table, err))
		} else if n > 0 {
			left = append(left, fmt.Sprintf("%d rows in %s", n, q.table))
		}
	}
	// A claim names its backend: say whether that connection still lives.
	var claims string
	_ = e.storage.QueryRow(ctx, `SELECT coalesce(string_agg(format('low %s pid %s %s', r.low, r.pid,
			CASE WHEN a.pid IS NULL THEN 'gone' ELSE 'alive: ' || a.state || ' ' || left(a.query, 60) END), '; '), '')
		FROM syncpipe.op_reservations r LEFT JOIN pg_stat_activity a ON a.pid = r.pid AND a.backend_start = r.backend_start
		WHERE r.group_id = $1`, group).Scan(&claims)
	if claims != "" {
		left = append(left, "claims: "+claims)
	}
	var slots int
	if err := e.src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&slots); err != nil || slots > 0 {
		left = append(left, fmt.Sprintf("slot %s (%d, %v)", slot, slots, err))
	}
	return strings.Join(left, ", ")
}

// churnLog counts the source transactions reloadChurn committed by the state
// group 2 had right after each commit ("" before it existed).
type churnLog struct {
	mu sync.Mutex
	by map[string]int
}

func (l *churnLog) count(state string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[state]
}

// reloadChurn changes the source until ctx ends, one transaction every 30 ms:
// todos inserted, updated and deleted, and now and then a new list (a new
// bucket for every client). A failed transaction fails the test at once.
func reloadChurn(ctx context.Context, t *testing.T, uri string, state func(int) string) (*churnLog, <-chan struct{}) {
	conn := pgtest.Connect(t, uri)
	l := &churnLog{by: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ctx.Err() == nil; n++ {
			q := fmt.Sprintf(`INSERT INTO todos (id, list_id, description)
					SELECT gen_random_uuid(), id, 'churn %[1]d' FROM lists ORDER BY random() LIMIT 2;
				UPDATE todos SET description = 'churn %[1]d ' || id, completed = NOT completed
					WHERE id IN (SELECT id FROM todos TABLESAMPLE SYSTEM (1) LIMIT 5);
				DELETE FROM todos WHERE id IN (SELECT id FROM todos TABLESAMPLE SYSTEM (1) LIMIT 1);`, n)
			if n%20 == 19 {
				q += fmt.Sprintf(`INSERT INTO lists (id, name, owner_id) VALUES (gen_random_uuid(), 'churn list %d', 'x');`, n)
			}
			if _, err := conn.Exec(ctx, q); err != nil {
				if ctx.Err() == nil {
					t.Errorf("change the source: %v", err)
				}
				return
			}
			s := state(2)
			l.mu.Lock()
			l.by[s]++
			l.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Millisecond):
			}
		}
	}()
	return l, done
}
