package crash

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/longtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// crashEnv is a source with the todo data, an empty storage database and a
// config for `syncpipe run --role replication` against them, with small
// snapshot chunks so that a crash finds some half-written.
type crashEnv struct {
	*harness.Env
	restarts int

	mu      sync.Mutex
	skipped int64 // snapshot rows written twice, summed from the children's logs
}

const crashChunkRows = 500

func newCrashEnv(t *testing.T, size todos.Size) *crashEnv {
	e := &crashEnv{}
	e.Env = harness.New(t, harness.Options{
		Data:        &size,
		Replication: fmt.Sprintf("snapshot: {chunk_rows: %d, split_rows: 4000, max_ranges_per_table: 3, flush_writers: 2}", crashChunkRows),
	})
	return e
}

// start runs `syncpipe run --role replication` as a child process.
func (e *crashEnv) start() *harness.Proc {
	e.T.Helper()
	return e.StartWith(harness.ProcConfig{Args: []string{"--role", "replication"}, OnLine: e.readLog})
}

// readLog sums the rows each child found already stored when a snapshot
// chunk was written again after a crash.
func (e *crashEnv) readLog(line []byte) {
	var rec struct {
		Msg     string
		Skipped int64
	}
	if json.Unmarshal(line, &rec) == nil && rec.Skipped > 0 {
		e.mu.Lock()
		e.skipped += rec.Skipped
		e.mu.Unlock()
	}
}

// kill SIGKILLs the child: no shutdown path runs.
func (e *crashEnv) kill(p *harness.Proc) {
	p.Kill()
	e.restarts++
}

// awaitCrashPoint returns at a random point of a running snapshot. One
// crash in four lands during start-up (slot creation, range planning, the
// first chunks); the others land once the child has committed one to four
// more chunks than before it started, and a little later still, so a crash
// finds chunks half-written by the flush writers. Tying the point to the
// snapshot's progress rather than to the clock keeps every crash inside the
// snapshot however fast the machine copies rows.
func (e *crashEnv) awaitCrashPoint(ctx context.Context, p *harness.Proc, rng *rand.Rand) {
	e.T.Helper()
	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // the crash point, not synchronisation
		return
	}
	target := e.snapshotRows(ctx) + int64(1+rng.IntN(4))*crashChunkRows
	harness.Poll(e.T, ctx, p, fmt.Sprintf("%d snapshot rows", target), func() bool {
		return e.snapshotRows(ctx) >= target || e.snapshotDone(ctx)
	})
	time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // the crash point within the next chunks
}

// snapshotRows is how many rows the snapshot has committed as done.
func (e *crashEnv) snapshotRows(ctx context.Context) int64 {
	var n int64
	// Before the child has planned the snapshot the table does not exist yet.
	_ = e.Storage.QueryRow(ctx, "SELECT coalesce(sum(rows_done), 0) FROM syncpipe.snapshot_ranges").Scan(&n)
	return n
}

func (e *crashEnv) snapshotDone(ctx context.Context) bool {
	var done bool
	err := e.Storage.QueryRow(ctx, "SELECT coalesce(bool_or(snapshot_done), false) FROM syncpipe.groups").Scan(&done)
	return err == nil && done
}

func (e *crashEnv) check(ctx context.Context) {
	e.T.Helper()
	got, err := bucketcheck.Stored(ctx, e.Storage, "syncpipe")
	if err != nil {
		e.T.Fatal(err)
	}
	want, err := bucketcheck.ExpectedTodos(ctx, e.Src)
	if err != nil {
		e.T.Fatal(err)
	}
	if err := bucketcheck.Diff(got, want); err != nil {
		e.T.Fatalf("after %d crashes: %v", e.restarts, err)
	}
	// No row version was written twice: every (bucket, row, data) has one PUT.
	var dups int
	err = e.Storage.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM syncpipe.bucket_ops WHERE op = 1
		GROUP BY bucket_name, object_type, object_id, md5(data) HAVING count(*) > 1) d`).Scan(&dups)
	if err != nil || dups != 0 {
		e.T.Fatalf("%d row versions have more than one PUT (%v)", dups, err)
	}
}

// TestCrashDuringSnapshotAndStreaming kills `syncpipe run` with SIGKILL at
// random points, ten times while it snapshots and ten times while it
// streams changes that keep coming, and checks that storage ends up equal
// to the source with no row version written twice and no more re-written
// snapshot rows than the chunks in flight at each crash.
//
// Long work: by default four crashes of each kind on a third of the data,
// with longtest's fixed seed; SYNCPIPE_TEST_LONG=1 runs the ten and ten on
// 60,000 todos.
func TestCrashDuringSnapshotAndStreaming(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	kills := longtest.Pick(4, 10)
	e := newCrashEnv(t, todos.Size{Lists: 40, Todos: longtest.Pick(20000, 60000), Seed: 9})
	rng := rand.New(rand.NewPCG(longtest.Seed(t), 1))

	snapshotKills := 0
	for snapshotKills < kills {
		p := e.start()
		e.awaitCrashPoint(ctx, p, rng)
		e.kill(p)
		if e.snapshotDone(ctx) {
			break
		}
		snapshotKills++
	}
	if snapshotKills < kills {
		t.Fatalf("the snapshot finished after %d crashes; make the data set larger so %d land in it", snapshotKills, kills)
	}
	// Let the snapshot finish, then crash the stream while the source keeps changing.
	p := e.start()
	e.WaitCaughtUp(ctx)
	e.check(ctx)
	e.kill(p)

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() { writerDone <- churn(ctx, e.Src, stop) }()
	for range kills {
		p := e.start()
		// The crash lands while the child streams: after it has started
		// streaming (start-up under -race on a busy machine can take longer
		// than the whole random delay), at a random point of it.
		p.WaitLogged(ctx, `"msg":"streaming from the replication slot"`)
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // the crash point, not synchronisation
		e.kill(p)
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	e.start()
	e.WaitCaughtUp(ctx)
	e.check(ctx)

	e.mu.Lock()
	skipped := e.skipped
	e.mu.Unlock()
	// Each crash can leave at most the chunks being flushed (2 writers) plus
	// those queued between stages written but uncommitted.
	if limit := int64(snapshotKills) * 6 * crashChunkRows; skipped > limit {
		t.Fatalf("%d snapshot rows were written again after %d crashes; at most %d (chunks in flight) allowed", skipped, snapshotKills, limit)
	}
	t.Logf("%d crashes during the snapshot, %d while streaming; %d snapshot rows re-written", snapshotKills, kills, skipped)
}

// churn changes the source until stop is closed: every update gives the
// row a unique description, so each row version is distinguishable.
func churn(ctx context.Context, src *pgx.Conn, stop <-chan struct{}) error {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return nil
		default:
		}
		var q string
		switch n % 4 {
		case 0:
			q = fmt.Sprintf(`INSERT INTO todos (id, list_id, description) SELECT gen_random_uuid(), id, 'churn %d' FROM lists ORDER BY random() LIMIT 3`, n)
		case 1:
			q = fmt.Sprintf(`UPDATE todos SET description = 'v%d ' || id, list_id = (SELECT id FROM lists ORDER BY random() LIMIT 1)
				WHERE id IN (SELECT id FROM todos ORDER BY random() LIMIT 5)`, n)
		case 2:
			q = `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY random() LIMIT 2)`
		case 3:
			q = fmt.Sprintf(`UPDATE todos SET completed = NOT completed, description = 'c%d ' || id WHERE id IN (SELECT id FROM todos ORDER BY random() LIMIT 4)`, n)
		}
		if _, err := src.Exec(ctx, q); err != nil {
			return fmt.Errorf("churn: %w", err)
		}
	}
}
