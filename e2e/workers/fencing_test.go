package workers

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestPausedStreamHolderIsFencedOut: two `syncpipe run --role
// replication` processes share a group. The process holding the stream is
// caught in the middle of a storage write — the test holds the stored
// rows the write replaces, so the write waits there — and SIGSTOPped
// past its lease. The other process takes the stream over, reading the
// progress storage holds, and is SIGSTOPped itself as it says so, before
// it reads the transaction from the slot. The paused process is SIGCONTed
// while the test holds the lease table, so that its heartbeat cannot tell
// it the lease is gone: its write runs on to the commit, and only the
// token check stops it. Then the new holder goes on and applies the
// transaction from the progress it read — with the check disabled, the
// stale piece has committed and it applies it again. No change is applied
// twice (each round of the transaction gives every row a new description,
// so a re-applied piece shows as a (row, data) PUT twice) and storage ends
// equal to the source.
//
// The new holder is stopped before its own write: had it read the stored
// rows while the paused write held them, that write's rows would clash
// with the stale commit (a duplicate key) and the retry would resume past
// the stale piece, hiding a missing token check.
func TestPausedStreamHolderIsFencedOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The takeover is waited for as a condition. The one margin: the new
	// holder stays stopped from the takeover until the paused write has
	// committed or rolled back — the rest of one piece written and a few
	// polls: 46–259 ms measured under -race on 2 busy cores — and must
	// not lose its lease meanwhile. It took the lease at most a source
	// connection before it was stopped, so 5 s leaves it over 3 s.
	const lease = 5 * time.Second
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 5, Todos: 300, Seed: 3},
		Env: []string{
			"SYNCPIPE_REPLICATION__STREAM__BATCH_MAX_ROWS=500",
			"SYNCPIPE_REPLICATION__WORKERS_PER_PROCESS=1",
			fmt.Sprintf("SYNCPIPE_REPLICATION__LEASE__DURATION=%s", lease),
			"SYNCPIPE_REPLICATION__LEASE__HEARTBEAT=1s",
		},
	})
	const streaming = `"msg":"streaming from the replication slot"`
	// The process the test stops as it logs that it streams (armed once
	// the holder is paused): it logs so after reading its progress and
	// before it opens the slot (replication.stream).
	var stopOnStream atomic.Pointer[harness.Proc]
	var stoppedAt atomic.Int64
	start := func() *harness.Proc {
		var self atomic.Pointer[harness.Proc]
		p := e.StartWith(harness.ProcConfig{Args: []string{"--role", "replication"}, OnLine: func(line []byte) {
			// Once: disarmed as it fires.
			if p := self.Load(); p != nil && bytes.Contains(line, []byte(streaming)) && stopOnStream.CompareAndSwap(p, nil) {
				p.Signal(syscall.SIGSTOP)
				stoppedAt.Store(time.Now().UnixNano())
			}
		}})
		self.Store(p)
		return p
	}
	procs := []*harness.Proc{start(), start()}
	holder := -1
	e.WaitFor(ctx, "one process streaming", func() bool {
		for i, p := range procs {
			if !p.Running() {
				t.Fatalf("process %d exited: %v: %s", i, p.Err(), p.Tail(2<<10))
			}
			if p.Logged(streaming) {
				holder = i
			}
		}
		return holder >= 0
	})
	paused, other := procs[holder], procs[1-holder]
	e.WaitFor(ctx, "the snapshot done", func() bool { return paused.Logged(`"msg":"snapshot done"`) })
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))

	// Hold the stored rows: the holder's write of the transaction's first
	// piece waits where it replaces them, with its ops to write after.
	rows := lockRow(ctx, e, `SELECT 1 FROM syncpipe.current_data3 WHERE group_id = 1 FOR UPDATE`)
	tx, err := e.Src.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first round moves every todo to another list — a stored row is
	// replaced only when its buckets change — and every round gives each
	// row a new description.
	if _, err := tx.Exec(ctx, `UPDATE todos t SET list_id = (SELECT id FROM lists WHERE id <> t.list_id ORDER BY id LIMIT 1),
		description = 'round 0 of ' || id`); err != nil {
		t.Fatal(err)
	}
	for r := 1; r < 30; r++ {
		if _, err := tx.Exec(ctx, `UPDATE todos SET description = $1 || id`, fmt.Sprintf("round %d of ", r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows.waitBlocking(ctx, "the holder's write waiting for the stored rows", "DELETE FROM current_data")
	paused.Signal(syscall.SIGSTOP)
	stopOnStream.Store(other)
	rows.release(ctx) // the paused write's statement runs; its transaction stays open
	// Past the paused process's lease, the other takes the stream over
	// and is stopped as it logs so.
	harness.Poll(t, ctx, other, "the other process to take the stream over", func() bool { return stoppedAt.Load() != 0 })
	stopped := time.Unix(0, stoppedAt.Load())
	t.Cleanup(func() { other.Signal(syscall.SIGCONT) }) // on a failure: stopped processes are killed at the end anyway
	// Its heartbeat would see the takeover at once on waking: holding the
	// lease table keeps the heartbeat (and the fence) waiting, as a slow
	// storage would, while the write runs on.
	leases := lockRow(ctx, e, `LOCK TABLE syncpipe.leases IN EXCLUSIVE MODE`)
	paused.Signal(syscall.SIGCONT)
	var pieces int64
	harness.Poll(t, ctx, paused, "the woken process's write at its fence (or, unfenced, committed)", func() bool {
		var fenced int
		err := e.Storage.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))
				AND starts_with(query, 'DELETE FROM op_reservations')),
			(SELECT coalesce(stream_txn_changes, 0) FROM syncpipe.groups WHERE id = 1)`, leases.pid).Scan(&fenced, &pieces)
		return err == nil && (fenced > 0 || pieces > 0)
	})
	leases.release(ctx)
	// The paused write ends: rolled back at its fence (no transaction
	// holds current_data's rows any more: the new holder has written
	// nothing), or, unfenced, committed.
	e.WaitFor(ctx, "the woken process's write committed or rolled back", func() bool {
		var open int
		err := e.Storage.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_locks WHERE relation = 'syncpipe.current_data3'::regclass
				AND mode = 'RowExclusiveLock'),
			(SELECT coalesce(stream_txn_changes, 0) FROM syncpipe.groups WHERE id = 1)`).Scan(&open, &pieces)
		return err == nil && (open == 0 || pieces > 0)
	})
	other.Signal(syscall.SIGCONT)
	t.Logf("the new holder was stopped for %s (lease %s); progress after the woken write: %d changes of the transaction",
		time.Since(stopped).Round(time.Millisecond), lease, pieces)

	// The new holder streams on; the paused one may exit or go on after
	// its fence (either is fine), so the waits watch the new holder.
	converge(ctx, e, other, time.Minute)
	var dup int
	if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM syncpipe.bucket_ops WHERE op = 1 AND object_type = 'todos'
		GROUP BY object_id, data HAVING count(*) > 1) d`).Scan(&dup); err != nil {
		t.Fatal(err)
	}
	if dup > 0 {
		t.Fatalf("%d changes were applied twice: the paused process wrote after it lost its lease", dup)
	}
	if n := paused.Count(streaming); n != 1 {
		t.Errorf("the woken process streamed %d times, want once (before the pause)", n)
	}
}

// rowLock is a storage row the test holds locked in a transaction of its
// own, to stop a syncpipe write at a chosen statement.
type rowLock struct {
	e    *harness.Env
	conn *pgx.Conn
	pid  uint32
}

// lockRow runs q (a SELECT … FOR UPDATE, a LOCK TABLE) on storage in a
// transaction it keeps open.
func lockRow(ctx context.Context, e *harness.Env, q string) *rowLock {
	e.T.Helper()
	conn, err := pgx.Connect(ctx, e.StorageURI)
	if err != nil {
		e.T.Fatal(err)
	}
	l := &rowLock{e: e, conn: conn, pid: conn.PgConn().PID()}
	e.T.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		e.T.Fatal(err)
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		e.T.Fatal(err)
	}
	return l
}

// waitBlocking waits until a statement starting with query waits for
// the lock.
func (l *rowLock) waitBlocking(ctx context.Context, what, query string) {
	l.e.T.Helper()
	l.e.WaitFor(ctx, what, func() bool {
		var n int
		err := l.e.Storage.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND starts_with(ltrim(query), $2)`, l.pid, query).Scan(&n)
		return err == nil && n > 0
	})
}

// release ends the lock's transaction.
func (l *rowLock) release(ctx context.Context) {
	l.e.T.Helper()
	if _, err := l.conn.Exec(ctx, "ROLLBACK"); err != nil {
		l.e.T.Fatal(err)
	}
}
