package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// childEnv makes the test binary act as `syncpipe` (see TestMain), so crash
// tests can run and SIGKILL real syncpipe processes without building one.
const childEnv = "SYNCPIPE_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	pgtest.Main(m)
}

// crashEnv is a source with the todo data, an empty storage database and a
// config for `syncpipe run` against them.
type crashEnv struct {
	t        *testing.T
	dir      string
	src      *pgx.Conn
	storage  *pgxpool.Pool
	config   string
	restarts int
	skipped  int64 // snapshot rows written twice, summed from the children's logs
	mu       sync.Mutex
}

const crashChunkRows = 500

func newCrashEnv(t *testing.T, size todos.Size) *crashEnv {
	ctx := context.Background()
	e := &crashEnv{t: t, dir: t.TempDir()}
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	e.src = pgtest.Connect(t, source)
	if _, err := todos.Load(ctx, e.src, size); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "rules.yaml"), []byte(todos.Rules), 0o644); err != nil {
		t.Fatal(err)
	}
	e.config = filepath.Join(e.dir, "syncpipe.yaml")
	cfg := fmt.Sprintf(`source: {uri: %q}
storage: {uri: %q}
sync_rules: {path: rules.yaml}
replication:
  workers_per_process: 2
  snapshot: {chunk_rows: %d, split_rows: 4000, max_ranges_per_table: 3, flush_writers: 2}
  stream: {batch_max_wait: 20ms}
telemetry: {metrics_listen: ""}
log: {level: info, format: json}
`, source, storage, crashChunkRows)
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	e.storage, err = pgxpool.New(ctx, storage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.storage.Close)
	return e
}

// start runs `syncpipe run --role replication` as a child process.
func (e *crashEnv) start() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{"run", "--config", e.config, "--role", "replication"}, "\x1f"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go e.readLogs(stderr)
	return cmd
}

// readLogs sums the rows each child found already stored when a snapshot
// chunk was written again after a crash.
func (e *crashEnv) readLogs(r interface{ Read([]byte) (int, error) }) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var rec struct {
			Msg     string
			Skipped int64
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Skipped > 0 {
			e.mu.Lock()
			e.skipped += rec.Skipped
			e.mu.Unlock()
		}
	}
}

// kill SIGKILLs the child: no shutdown path runs.
func (e *crashEnv) kill(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	e.restarts++
}

// awaitCrashPoint returns at a random point of a running snapshot. One
// crash in four lands during start-up (slot creation, range planning, the
// first chunks); the others land once the child has committed one to four
// more chunks than before it started, and a little later still, so a crash
// finds chunks half-written by the flush writers. Tying the point to the
// snapshot's progress rather than to the clock keeps every crash inside the
// snapshot however fast the machine copies rows.
func (e *crashEnv) awaitCrashPoint(ctx context.Context, rng *rand.Rand) {
	e.t.Helper()
	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // the crash point, not synchronisation
		return
	}
	target := e.snapshotRows(ctx) + int64(1+rng.IntN(4))*crashChunkRows
	for e.snapshotRows(ctx) < target && !e.snapshotDone(ctx) {
		select {
		case <-ctx.Done():
			e.t.Fatalf("waiting for %d snapshot rows: %v", target, ctx.Err())
		case <-time.After(5 * time.Millisecond): // polling the progress table; nothing notifies on it
		}
	}
	time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond) // the crash point within the next chunks
}

// snapshotRows is how many rows the snapshot has committed as done.
func (e *crashEnv) snapshotRows(ctx context.Context) int64 {
	var n int64
	// Before the child has planned the snapshot the table does not exist yet.
	_ = e.storage.QueryRow(ctx, "SELECT coalesce(sum(rows_done), 0) FROM syncpipe.snapshot_ranges").Scan(&n)
	return n
}

func (e *crashEnv) snapshotDone(ctx context.Context) bool {
	var done bool
	err := e.storage.QueryRow(ctx, "SELECT coalesce(bool_or(snapshot_done), false) FROM syncpipe.groups").Scan(&done)
	return err == nil && done
}

// waitCaughtUp blocks until a checkpoint at or past the source's current
// WAL position is published (LISTEN on the checkpoint channel).
func (e *crashEnv) waitCaughtUp(ctx context.Context) {
	e.t.Helper()
	var target string
	if err := e.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		e.t.Fatal(err)
	}
	conn, err := e.storage.Acquire(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN syncpipe_checkpoints"); err != nil {
		e.t.Fatal(err)
	}
	for {
		var reached bool
		err := conn.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false)
			FROM syncpipe.groups WHERE state = 'ACTIVE'`, target).Scan(&reached)
		if err == nil && reached {
			return
		}
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			e.t.Fatalf("waiting for a checkpoint past %s: %v", target, err)
		}
	}
}

func (e *crashEnv) check(ctx context.Context) {
	e.t.Helper()
	got, err := bucketcheck.Stored(ctx, e.storage, "syncpipe")
	if err != nil {
		e.t.Fatal(err)
	}
	want, err := bucketcheck.ExpectedTodos(ctx, e.src)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := bucketcheck.Diff(got, want); err != nil {
		e.t.Fatalf("after %d crashes: %v", e.restarts, err)
	}
	// No row version was written twice: every (bucket, row, data) has one PUT.
	var dups int
	err = e.storage.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM syncpipe.bucket_data WHERE op = 1
		GROUP BY bucket_name, object_type, object_id, md5(data) HAVING count(*) > 1) d`).Scan(&dups)
	if err != nil || dups != 0 {
		e.t.Fatalf("%d row versions have more than one PUT (%v)", dups, err)
	}
}

// TestCrashDuringSnapshotAndStreaming kills `syncpipe run` with SIGKILL at
// random points, ten times while it snapshots and ten times while it
// streams changes that keep coming, and checks that storage ends up equal
// to the source with no row version written twice and no more re-written
// snapshot rows than the chunks in flight at each crash.
func TestCrashDuringSnapshotAndStreaming(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e := newCrashEnv(t, todos.Size{Lists: 40, Todos: 60000, Seed: 9})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	snapshotKills := 0
	for snapshotKills < 10 {
		cmd := e.start()
		e.awaitCrashPoint(ctx, rng)
		e.kill(cmd)
		if e.snapshotDone(ctx) {
			break
		}
		snapshotKills++
	}
	if snapshotKills < 10 {
		t.Fatalf("the snapshot finished after %d crashes; make the data set larger so ten land in it", snapshotKills)
	}
	// Let the snapshot finish, then crash the stream while the source keeps changing.
	cmd := e.start()
	e.waitCaughtUp(ctx)
	e.check(ctx)
	e.kill(cmd)

	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() { writerDone <- churn(ctx, e.src, stop) }()
	for range 10 {
		cmd := e.start()
		time.Sleep(time.Duration(200+rng.IntN(500)) * time.Millisecond) // the crash point
		e.kill(cmd)
	}
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	cmd = e.start()
	defer e.kill(cmd)
	e.waitCaughtUp(ctx)
	e.check(ctx)

	e.mu.Lock()
	skipped := e.skipped
	e.mu.Unlock()
	// Each crash can leave at most the chunks being flushed (2 writers) plus
	// those queued between stages written but uncommitted.
	if limit := int64(snapshotKills) * 6 * crashChunkRows; skipped > limit {
		t.Fatalf("%d snapshot rows were written again after %d crashes; at most %d (chunks in flight) allowed", skipped, snapshotKills, limit)
	}
	t.Logf("%d crashes during the snapshot, 10 while streaming; %d snapshot rows re-written", snapshotKills, skipped)
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
