package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// runReplicator runs a replicator until the returned stop is called; stop
// returns its error (nil for the stop itself). A replicator that fails on
// its own fails the test.
func (e *env) runReplicator(t *testing.T, ctx context.Context) (stop func() error) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	r := New(Options{Config: e.cfg, Store: e.store})
	errc := make(chan error, 1)
	go func() {
		err := r.Run(rctx)
		if err != nil && rctx.Err() == nil {
			t.Errorf("replicator: %v", err)
		}
		errc <- err
	}()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		err := <-errc
		if rctx.Err() != nil {
			return nil
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// poll checks cond every 20 ms until it holds, failing when ctx ends.
func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// listenCheckpoints records the op id of every checkpoint storage
// announces (LISTEN on its channel) until the test ends.
func (e *env) listenCheckpoints(t *testing.T, ctx context.Context) (published func() []int64) {
	t.Helper()
	conn := pgtest.Connect(t, e.storage)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{e.store.NotifyChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var cps []int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(lctx)
			if err != nil {
				return
			}
			var cp bucketstore.Checkpoint
			if err := json.Unmarshal([]byte(n.Payload), &cp); err != nil {
				t.Errorf("checkpoint notification %q: %v", n.Payload, err)
				return
			}
			mu.Lock()
			cps = append(cps, cp.OpID)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int64(nil), cps...)
	}
}

// markedAt counts the todo PUTs at or below op id cp whose data contains
// marker.
func (e *env) markedAt(t *testing.T, ctx context.Context, cp int64, marker string) int {
	t.Helper()
	var n int
	err := e.store.Pool().QueryRow(ctx, `SELECT count(*) FROM bucket_ops
		WHERE op = 1 AND object_type = 'todos' AND op_id <= $1 AND strpos(data, $2) > 0`, cp, marker).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// txnChangesStored is how many changes of an unfinished source transaction
// storage holds (0 when none is half written).
func (e *env) txnChangesStored(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	var n int64
	err := e.store.Pool().QueryRow(ctx, `SELECT coalesce(max(stream_txn_changes) FILTER (WHERE stream_txn_lsn IS NOT NULL), 0)
		FROM groups`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// onePutPerRow checks that the ops after op id before are exactly one PUT
// for each of rows todos and nothing else.
func (e *env) onePutPerRow(t *testing.T, ctx context.Context, before int64, rows int) {
	t.Helper()
	var puts, distinct, other int
	err := e.store.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE op = 1),
			count(DISTINCT (bucket_name, object_id)) FILTER (WHERE op = 1), count(*) FILTER (WHERE op <> 1)
		FROM bucket_ops WHERE op_id > $1 AND object_type = 'todos'`, before).Scan(&puts, &distinct, &other)
	if err != nil {
		t.Fatal(err)
	}
	if puts != rows || distinct != rows || other != 0 {
		t.Fatalf("the transaction of %d row updates wrote %d PUTs for %d rows and %d other ops; want one PUT per row", rows, puts, distinct, other)
	}
}

func (e *env) maxOpID(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	var n int64
	if err := e.store.Pool().QueryRow(ctx, "SELECT coalesce(max(op_id), 0) FROM bucket_ops").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLargeTransactionInPieces: a source transaction forty times
// batch_max_rows (20,000 rows, 500 a batch) is written to storage in pieces, each recorded as a
// position inside the transaction, and no checkpoint is published until
// the whole of it is stored: every checkpoint holds all of its rows or
// none. A replicator stopped while the transaction is partly written
// (storage holds a position inside it), and started again, reuses the stored pieces: each row gets exactly one new
// PUT. (The same through the binary, with SIGKILLs and a sync client:
// e2e/crash TestLargeTransactions.)
func TestLargeTransactionInPieces(t *testing.T) {
	t.Parallel()
	const rows = 20000
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newEnv(t, todos.Size{Lists: 50, Todos: rows, Seed: 4}, `
replication:
  stream: {batch_max_rows: 500, batch_max_wait: 20ms}
`)
	stop := e.runReplicator(t, ctx)
	e.waitCheckpoint(t, ctx)
	sameBuckets(t, e.buckets(t), e.expected(t))

	published := e.listenCheckpoints(t, ctx)
	for round, marker := range []string{"bulk ", "again "} {
		before := e.maxOpID(t, ctx)
		seen := len(published())
		tag := `"description":"` + marker
		if _, err := e.src.Exec(ctx, `UPDATE todos SET description = $1 || id`, marker); err != nil {
			t.Fatal(err)
		}
		var pieces int64 // the most changes of the unfinished transaction seen stored
		if round == 1 {
			// Stopped once a quarter of the transaction is stored, then
			// started again. Its pieces (some twenty: at most 500 rows a
			// batch, and the source delivers a large transaction in parts
			// of about 1,000 changes) take seconds under -race and well
			// over 100 ms without it: the 20 ms polls see it unfinished.
			poll(t, ctx, "a quarter of the transaction to be stored", func() bool {
				pieces = max(pieces, e.txnChangesStored(t, ctx))
				return pieces >= rows/4
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			stop = e.runReplicator(t, ctx)
		}
		poll(t, ctx, "a checkpoint holding the whole transaction", func() bool {
			pieces = max(pieces, e.txnChangesStored(t, ctx))
			cps := published()
			return len(cps) > seen && e.markedAt(t, ctx, cps[len(cps)-1], tag) == rows
		})
		var partial []string
		for _, cp := range published()[seen:] {
			if n := e.markedAt(t, ctx, cp, tag); n > 0 && n < rows {
				partial = append(partial, fmt.Sprintf("checkpoint %d: %d of %d rows", cp, n, rows))
			}
		}
		if len(partial) > 0 {
			t.Fatalf("round %d: checkpoints held part of the transaction: %v", round, partial)
		}
		e.waitCheckpoint(t, ctx)
		sameBuckets(t, e.buckets(t), e.expected(t))
		e.onePutPerRow(t, ctx, before, rows)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
