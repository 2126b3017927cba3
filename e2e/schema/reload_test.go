package schema

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestReloadOnSIGHUP: a running `syncpipe run` gets a changed rules file
// and SIGHUP while sync clients follow /sync/stream and the source keeps
// changing. Without a restart, a reprocessing group snapshots and streams
// the new rules in the background while the old group keeps serving,
// takes over once caught up (ACTIVE), and the old group is retired: its
// slot dropped and all its storage cleared, its partitions dropped.
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
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 10, Todos: 10000, Seed: 4}})
	c := e.Start()
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	state := func(id int) (s string) {
		_ = e.Storage.QueryRow(ctx, "SELECT state FROM syncpipe.groups WHERE id = $1", id).Scan(&s)
		return s
	}
	e.WaitFor(ctx, "group 1 ACTIVE", func() bool { return state(1) == "ACTIVE" })
	var slot1 string
	if err := e.Storage.QueryRow(ctx, "SELECT slot_name FROM syncpipe.groups WHERE id = 1").Scan(&slot1); err != nil {
		t.Fatal(err)
	}

	// Before the switch: alice follows the stream (until the end of the
	// test), the source changes, and alice validates a checkpoint holding
	// exactly the source in group 1's buckets.
	aw := &harness.CheckpointWatch{}
	alice := e.Sync("alice", aw.Observe)
	e.Exec(ctx, `UPDATE todos SET description = 'before the switch ' || id, completed = NOT completed
		WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 100)`)
	e.Exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 10)`)
	e.WaitFor(ctx, "alice to hold the source in group 1's buckets", aw.Holds(e.Todos(ctx, 1)()))
	phase("alice holds the source in group 1's buckets")

	// bob and carol sync group 1 on connections that end when their
	// short-lived tokens expire.
	bw, cw := &harness.CheckpointWatch{}, &harness.CheckpointWatch{}
	bob := harness.NewSyncClient(e.API, "", bw.Observe)
	carol := harness.NewSyncClient(e.API, "", cw.Observe)
	connectUntilExpiry(ctx, e, bob, "bob", "before the switch")
	connectUntilExpiry(ctx, e, carol, "carol", "before the switch")
	if bw.Seen(1) == 0 || cw.Seen(1) == 0 {
		t.Fatalf("bob and carol saw %d and %d checkpoints of group 1 before the switch", bw.Seen(1), cw.Seen(1))
	}

	// The source changes from now until after the switch.
	gctx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	churned, churnDone := reloadChurn(gctx, t, e.SourceURI, state)
	served := e.WatchServing(gctx)
	e.WaitFor(ctx, "changes on the source before the reload", func() bool { return churned.count("") >= 3 })
	seen := aw.Seen(1)
	e.WaitFor(ctx, "alice to validate a checkpoint with them", func() bool { return aw.Seen(1) > seen })

	// Same buckets, new rules text: a new rules version.
	e.WriteFile("rules.yaml", "# version 2\n"+todos.Rules)
	c.Signal(syscall.SIGHUP)
	phase("SIGHUP")
	e.WaitFor(ctx, "a reprocessing group", func() bool { return state(2) != "" })
	if s := state(2); s != "PROCESSING" {
		t.Fatalf("group 2 is %s as soon as it is seen: the switch is too quick to test changes and reconnects during it; load more rows", s)
	}
	// bob reconnects while group 2 is being processed, resuming with group
	// 1's positions.
	connectUntilExpiry(ctx, e, bob, "bob", "during the switch")
	e.WaitFor(ctx, "group 2 ACTIVE and group 1 retired", func() bool {
		return state(2) == "ACTIVE" && state(1) == "TERMINATED"
	})
	phase("group 2 ACTIVE, group 1 TERMINATED")
	if n := churned.count("PROCESSING"); n == 0 {
		t.Fatal("no source change was committed while group 2 was being processed")
	}

	// Everything group 1 stored is cleared (bucketstore retireTables, and
	// its op id claims), its partitions dropped, its checkpoint reset and
	// its slot dropped.
	var left string
	wctx, stopWaiting := context.WithTimeout(ctx, time.Minute)
	defer stopWaiting()
	defer func() {
		if t.Failed() && left != "" {
			t.Logf("group 1 still has %s", left)
		}
	}()
	e.WaitFor(wctx, "group 1's storage cleared and its slot dropped", func() bool {
		left = groupLeftovers(ctx, e, 1, slot1)
		return left == ""
	})
	phase("group 1 cleared")

	// After the switch: more changes, validated by alice in group 2's
	// buckets.
	after := churned.count("ACTIVE")
	e.WaitFor(ctx, "changes on the source after group 1 was retired", func() bool { return churned.count("ACTIVE") >= after+5 })
	seen = aw.Seen(2)
	e.WaitFor(ctx, "alice to validate a checkpoint of group 2 with them", func() bool { return aw.Seen(2) > seen })
	stopChurn()
	<-churnDone
	if gaps := <-served; gaps > 0 {
		t.Fatalf("%d times no group was serving: group 1 stopped before group 2 took over", gaps)
	}
	e.Exec(ctx, `UPDATE todos SET description = 'after the switch ' || id WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 100)`)
	e.Exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 10)`)
	e.Exec(ctx, `INSERT INTO lists (id, name, owner_id) VALUES (gen_random_uuid(), 'after the switch', 'x')`)
	e.Exec(ctx, `INSERT INTO todos (id, list_id, description)
		SELECT gen_random_uuid(), id, 'in a new list' FROM lists WHERE name = 'after the switch'`)
	e.WaitCaughtUp(ctx)
	want := e.Todos(ctx, 2)()
	e.Converge(ctx, time.Minute, func() bucketcheck.State { return want })
	e.WaitFor(ctx, "alice to hold the source in group 2's buckets", aw.Holds(want))
	phase("alice holds the source in group 2's buckets")

	// bob (who may have moved to group 2 on his connection during the
	// switch) and carol (offline since before it, holding group 1's
	// positions) reconnect and catch up.
	bctx, stopOthers := context.WithCancel(ctx)
	defer stopOthers()
	bob.SetToken(e.Token("bob"))
	carol.SetToken(e.Token("carol"))
	go bob.Run(bctx)
	go carol.Run(bctx)
	e.WaitFor(ctx, "bob to hold the source in group 2's buckets", bw.Holds(want))
	e.WaitFor(ctx, "carol to hold the source in group 2's buckets", cw.Holds(want))
	phase("bob and carol hold it too")

	// Checked before any client is stopped: a stream cut by the client
	// may end inside a line.
	for _, cl := range []struct {
		name string
		c    *harness.SyncClient
		w    *harness.CheckpointWatch
	}{{"alice", alice, aw}, {"bob", bob, bw}, {"carol", carol, cw}} {
		if f := cl.c.Failures(); len(f) > 0 {
			t.Errorf("%s saw protocol errors (checksum failures): %v", cl.name, f)
		}
		if p := cl.w.Problems(); len(p) > 0 {
			t.Errorf("%s saw checkpoints across groups: %v", cl.name, p)
		}
		if cl.w.Seen(2) == 0 {
			t.Errorf("%s never completed a checkpoint of group 2", cl.name)
		}
	}
	// The clients' connections alternate between what the SDKs ask for
	// (BSON, zstd) and NDJSON with gzip: the API counts bytes of both.
	ss := harness.Scrape(ctx, e.API)
	for _, enc := range [][2]string{{"application/vnd.powersync.bson-stream", "zstd"}, {"application/x-ndjson", "gzip"}} {
		if n, _ := harness.Sample(ss, "syncpipe_sync_sent_bytes_total", "content_type", enc[0], "content_encoding", enc[1]); n <= 0 {
			t.Errorf("/metrics: %v bytes sent as %s with %s, want > 0", n, enc[0], enc[1])
		}
	}
	if aw.Seen(1) < 2 || aw.Seen(2) < 2 {
		t.Errorf("alice completed %d checkpoints of group 1 and %d of group 2; want changes validated in both", aw.Seen(1), aw.Seen(2))
	}
	t.Logf("checkpoints completed: alice %d of group 1, %d of group 2; bob %d, %d; carol %d, %d; source transactions before/during/after: %d/%d/%d",
		aw.Seen(1), aw.Seen(2), bw.Seen(1), bw.Seen(2), cw.Seen(1), cw.Seen(2), churned.count(""), churned.count("PROCESSING"), churned.count("ACTIVE"))
	e.Alive()
	if !e.Logged("SIGHUP: reading the sync rules again") {
		t.Fatal("the reload was not logged")
	}
}

// connectUntilExpiry syncs cl on connections with a 3 s token, which the
// server ends when the token expires (at a line boundary: ending them from
// the client could cut a line), until one of them completed a checkpoint.
// Margin: a connection has the 3 s less the time from minting to
// connecting (a `syncpipe token` run) to complete a checkpoint, which
// takes well under a second for this data set, and 20 connections are
// tried before the test fails.
func connectUntilExpiry(ctx context.Context, e *harness.Env, cl *harness.SyncClient, sub, when string) {
	e.T.Helper()
	for attempt := 1; ; attempt++ {
		seen := cl.Complete()
		// No connection of cl is running: the previous one has ended.
		cl.SetToken(e.TokenTTL(sub, 3*time.Second))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cl.Once(ctx)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			e.T.Fatalf("%s %s: the connection did not end: %v", sub, when, ctx.Err())
		}
		if f := cl.Failures(); len(f) > 0 {
			e.T.Fatalf("%s %s: the sync client saw protocol errors: %v", sub, when, f)
		}
		if cl.Complete() > seen {
			return
		}
		if attempt == 20 {
			e.T.Fatalf("%s %s: 20 connections completed no checkpoint", sub, when)
		}
	}
}

// groupLeftovers describes what storage and the source still hold for a
// retired group ("" when nothing): rows of every per-group table, its
// bucket names, its partitions (a storage version 2 group's are dropped,
// not only emptied: attached, detach pending or detached, any table left
// is named), a checkpoint, or its slot.
func groupLeftovers(ctx context.Context, e *harness.Env, group int, slot string) string {
	var left []string
	for _, q := range []struct{ table, where string }{
		{"bucket_ops", "group_id = $1"},
		{"bucket_parameters", "group_id = $1"},
		{"bucket_changes", "group_id = $1"},
		{"current_data2", "group_id = $1"},
		{"current_data3", "group_id = $1"},
		{"snapshot_ranges", "source_table_id IN (SELECT id FROM syncpipe.source_tables WHERE group_id = $1)"},
		{"source_tables", "group_id = $1"},
		{"op_reservations", "group_id = $1"},
		{"bucket_names", "group_id = $1"},
		{"groups", "id = $1 AND (last_checkpoint IS NOT NULL OR state <> 'TERMINATED')"},
	} {
		var n int
		if err := e.Storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe."+q.table+" WHERE "+q.where, group).Scan(&n); err != nil {
			left = append(left, fmt.Sprintf("%s: %v", q.table, err))
		} else if n > 0 {
			left = append(left, fmt.Sprintf("%d rows in %s", n, q.table))
		}
	}
	var parts string
	err := e.Storage.QueryRow(ctx, `SELECT coalesce(string_agg(c.relname || CASE WHEN i.inhrelid IS NULL THEN ' (detached)'
			WHEN i.inhdetachpending THEN ' (detach pending)' ELSE ' (attached)' END, ', ' ORDER BY c.relname), '')
		FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		WHERE c.relnamespace = 'syncpipe'::regnamespace AND c.relname IN ('bucket_data2_g' || $1::int, 'current_data2_g' || $1::int, 'current_data3_g' || $1::int)`, group).Scan(&parts)
	if err != nil {
		left = append(left, fmt.Sprintf("partitions: %v", err))
	} else if parts != "" {
		left = append(left, "partitions "+parts)
	}
	// A claim names its backend: say whether that connection still lives.
	var claims string
	_ = e.Storage.QueryRow(ctx, `SELECT coalesce(string_agg(format('low %s pid %s %s', r.low, r.pid,
			CASE WHEN a.pid IS NULL THEN 'gone' ELSE 'alive: ' || a.state || ' ' || left(a.query, 60) END), '; '), '')
		FROM syncpipe.op_reservations r LEFT JOIN pg_stat_activity a ON a.pid = r.pid AND a.backend_start = r.backend_start
		WHERE r.group_id = $1`, group).Scan(&claims)
	if claims != "" {
		left = append(left, "claims: "+claims)
	}
	var slots int
	if err := e.Src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&slots); err != nil || slots > 0 {
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
// It is not long work to bound: it runs only while the test waits for the
// switch (the 30 ms is its pace, not a wait for anything).
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
