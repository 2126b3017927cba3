package replication

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/logbuf"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// gate stops a replicator at a hook (testHooks) once armed, until
// released or the hook's context ends.
type gate struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when a hook first stopped at the gate
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	if !g.armed {
		g.mu.Unlock()
		return
	}
	select {
	case <-g.entered:
	default:
		close(g.entered)
	}
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

// TestPausedStreamHolderIsFencedOut is the end-to-end test of the same
// name (e2e/workers) in-process, with hooks where that one sends
// SIGSTOP: two replicators share a group, each with a storage pool of its
// own. The holder of the stream is caught in the middle of a storage
// write — the test holds the stored rows the write replaces — and its
// heartbeat is stopped, so its lease runs out and the other replicator
// takes the stream over. The new holder is stopped once it has read the
// stream's progress, before it reads the stored rows. The test lets the
// paused write go on: only the token check stops it at its commit (with
// the check disabled the stale piece commits, and the new holder, which
// resumes from the progress it read before, applies it again). No change
// is applied twice and storage ends equal to the source.
func TestPausedStreamHolderIsFencedOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	src := pgtest.Connect(t, source)
	if _, err := todos.Load(ctx, src, todos.Size{Lists: 5, Todos: 300, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	// No margin depends on the lease: the holder's heartbeat is stopped,
	// not slowed, and the new holder's goes on while it is stopped.
	cfg, err := config.LoadBytes("test.yaml", fmt.Appendf(nil, `
source: {uri: %q, publication: syncpipe}
storage: {uri: %q}
sync_rules:
  content: |
%s
replication:
  workers_per_process: 1
  lease: {duration: 2s, heartbeat: 500ms}
  stream: {batch_max_rows: 500, batch_max_wait: 20ms}
`, source, storage, indent(todos.Rules, "    ")))
	if err != nil {
		t.Fatal(err)
	}
	type replicator struct {
		r    *Replicator
		logs *logbuf.Buffer
		errc chan error
	}
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	start := func(name string, h testHooks) *replicator {
		store, err := bucketstore.Open(ctx, bucketstore.Config{URI: storage})
		if err != nil {
			t.Fatal(err)
		}
		rp := &replicator{logs: &logbuf.Buffer{}, errc: make(chan error, 1)}
		rp.r = New(Options{Config: cfg, Store: store, Logger: slog.New(slog.NewJSONHandler(rp.logs, nil))})
		rp.r.hooks = h
		rctx, stop := context.WithCancel(ctx)
		go func() { rp.errc <- rp.r.Run(rctx) }()
		stops = append(stops, func() {
			stop()
			<-rp.errc
			store.Close()
			if t.Failed() {
				t.Logf("replicator %s's logs:\n%s", name, rp.logs.String())
			}
		})
		return rp
	}
	db, err := pgxpool.New(ctx, storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var all []*replicator
	// waitFor polls cond every 20 ms until it holds, failing when ctx
	// ends or a replicator stops.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			for _, rp := range all {
				select {
				case err := <-rp.errc:
					rp.errc <- err // for the deferred stop
					t.Fatalf("waiting for %s: a replicator stopped: %v", what, err)
				default:
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			case <-tick.C:
			}
		}
	}
	const streaming = `"msg":"streaming from the replication slot"`
	pause, resumed := newGate(), newGate()
	defer pause.open()
	defer resumed.open()
	holder := start("holder", testHooks{beforeRenew: func(ctx context.Context, _ string) { pause.wait(ctx) }})
	all = append(all, holder)
	waitFor("the holder streaming", func() bool { return strings.Contains(holder.logs.String(), streaming) })
	other := start("other", testHooks{streamResumed: func(ctx context.Context, _ int) { resumed.wait(ctx) }})
	all = append(all, other)
	converge := func() {
		t.Helper()
		var last error
		defer func() {
			if t.Failed() && last != nil {
				t.Logf("storage still differed from the source: %v", last)
			}
		}()
		waitFor("storage equal to the source", func() bool {
			got, err := bucketcheck.Stored(ctx, db, "syncpipe")
			if err == nil {
				var want bucketcheck.State
				if want, err = bucketcheck.ExpectedTodos(ctx, src); err == nil {
					err = bucketcheck.Diff(got, want)
				}
			}
			last = err
			return err == nil
		})
	}
	converge()

	// Hold the stored rows: the holder's write of the transaction's first
	// piece waits where it replaces them, with its ops to write after.
	lock, err := pgx.Connect(ctx, storage)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	if _, err := lock.Exec(ctx, "BEGIN; SELECT 1 FROM syncpipe.current_data3 WHERE group_id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	tx, err := src.Begin(ctx)
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
	lockPID := lock.PgConn().PID()
	waitFor("the holder's write waiting for the stored rows", func() bool {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND starts_with(ltrim(query), 'DELETE FROM current_data')`, lockPID).Scan(&n)
		return err == nil && n > 0
	})
	// The holder "pauses": its heartbeat stops, so its lease runs out; the
	// other replicator takes the stream over and stops having read the
	// progress.
	pause.arm()
	resumed.arm()
	select {
	case <-resumed.entered:
	case <-ctx.Done():
		t.Fatal("the other replicator did not take the stream over")
	}
	// The paused write goes on to its commit: fenced, it rolls back and no
	// transaction holds current_data's rows any more (the new holder has
	// written nothing); unfenced, it commits its piece.
	if _, err := lock.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	var pieces int64
	waitFor("the paused write committed or rolled back", func() bool {
		var open int
		err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_locks WHERE relation = 'syncpipe.current_data3'::regclass
				AND mode = 'RowExclusiveLock'),
			(SELECT coalesce(stream_txn_changes, 0) FROM syncpipe.groups WHERE id = 1)`).Scan(&open, &pieces)
		return err == nil && (open == 0 || pieces > 0)
	})
	resumed.open()
	pause.open()
	t.Logf("progress after the paused write: %d changes of the transaction", pieces)

	converge()
	var dup int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM syncpipe.bucket_ops WHERE op = 1 AND object_type = 'todos'
		GROUP BY object_id, data HAVING count(*) > 1) d`).Scan(&dup); err != nil {
		t.Fatal(err)
	}
	if dup > 0 {
		t.Fatalf("%d changes were applied twice: the paused holder wrote after it lost its lease", dup)
	}
	if n := strings.Count(holder.logs.String(), streaming); n != 1 {
		t.Errorf("the paused holder streamed %d times, want once (before the pause)", n)
	}
}
