package replication

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/logbuf"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a source database with the todo data set and an empty storage
// database.
type env struct {
	source, storage string
	src             *pgx.Conn
	store           *bucketstore.Store
	cfg             *config.Config
}

func newEnv(t *testing.T, size todos.Size, extraYAML string) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{source: pgtest.NewDB(t), storage: pgtest.NewDB(t)}
	e.src = pgtest.Connect(t, e.source)
	if _, err := todos.Load(ctx, e.src, size); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadBytes("test.yaml", fmt.Appendf(nil, `
source: {uri: %q, publication: syncpipe}
storage: {uri: %q}
sync_rules:
  content: |
%s
%s`, e.source, e.storage, indent(todos.Rules, "    "), extraYAML))
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	e.store, err = bucketstore.Open(ctx, bucketstore.Config{URI: e.storage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.store.Close)
	return e
}

func indent(s, pre string) string {
	out := ""
	for _, line := range splitLines(s) {
		out += pre + line + "\n"
	}
	return out
}

func splitLines(s string) []string {
	var lines []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			lines = append(lines, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		lines = append(lines, s[start:])
	}
	return lines
}

// runUntilSnapshotDone runs a replicator until its first group finished
// its snapshot, then stops it.
func (e *env) runUntilSnapshotDone(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan struct{})
	r := New(Options{Config: e.cfg, Store: e.store, OnSnapshotDone: func(int) { close(done) }})
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-done:
	case err := <-errc:
		t.Fatalf("replicator stopped before the snapshot was done: %v", err)
	}
	cancel()
	<-errc
}

func (e *env) buckets(t *testing.T) bucketcheck.State {
	t.Helper()
	st, err := bucketcheck.Stored(context.Background(), e.store.Pool(), "syncpipe")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) expected(t *testing.T) bucketcheck.State {
	t.Helper()
	st, err := bucketcheck.ExpectedTodos(context.Background(), e.src)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func sameBuckets(t *testing.T, got, want bucketcheck.State) {
	t.Helper()
	if err := bucketcheck.Diff(got, want); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotIntoBuckets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todos.Size{Lists: 30, Todos: 2500, Seed: 3}, `
replication:
  snapshot: {chunk_rows: 300, split_rows: 800, max_ranges_per_table: 3}
`)
	e.runUntilSnapshotDone(t)
	sameBuckets(t, e.buckets(t), e.expected(t))

	// Every todos range was planned and finished; the table is done.
	var ranges, done int
	err := e.store.Pool().QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE done)
		FROM snapshot_ranges r JOIN source_tables t ON t.id = r.source_table_id WHERE t.table_name = 'todos'`).Scan(&ranges, &done)
	if err != nil {
		t.Fatal(err)
	}
	if ranges < 2 || done != ranges {
		t.Fatalf("todos: %d ranges, %d done; want ≥ 2 ranges, all done", ranges, done)
	}
}

// waitCheckpoint blocks until storage publishes a checkpoint at or beyond
// the source's current WAL position (LISTEN on the checkpoint channel).
func (e *env) waitCheckpoint(t *testing.T, ctx context.Context) {
	t.Helper()
	var target string
	if err := e.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, e.storage)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{e.store.NotifyChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for {
		var reached bool
		err := conn.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false) FROM syncpipe.groups WHERE state = 'ACTIVE'`, target).Scan(&reached)
		if err != nil {
			t.Fatal(err)
		}
		if reached {
			return
		}
		if _, err := conn.WaitForNotification(ctx); err != nil {
			t.Fatalf("waiting for a checkpoint past %s: %v", target, err)
		}
	}
}

// TestStreamAppliesChanges snapshots, then changes the source while
// streaming: inserts, a todo moving between lists, deletes, a list rename
// and a truncate, and checks buckets, checksums and acknowledgements.
func TestStreamAppliesChanges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newEnv(t, todos.Size{Lists: 10, Todos: 300, Seed: 5}, "")
	r := New(Options{Config: e.cfg, Store: e.store})
	errc := make(chan error, 1)
	go func() {
		err := r.Run(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("replicator: %v", err)
			cancel()
		}
		errc <- err
	}()
	e.waitCheckpoint(t, ctx)
	sameBuckets(t, e.buckets(t), e.expected(t))

	steps := []string{
		`INSERT INTO todos (id, list_id, description, completed, created_at)
		 SELECT gen_random_uuid(), id, 'new ' || name, false, '2026-02-03 04:05:06.5+00' FROM lists`,
		`UPDATE todos SET list_id = (SELECT id FROM lists ORDER BY id LIMIT 1) WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 20)`,
		`DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 15)`,
		`UPDATE lists SET name = name || ' (renamed)' WHERE id IN (SELECT id FROM lists ORDER BY id LIMIT 3)`,
		// A new column while streaming: every list is re-snapshotted with it.
		`ALTER TABLE lists ADD COLUMN color text DEFAULT 'blue'`,
		`UPDATE lists SET color = 'red' WHERE id IN (SELECT id FROM lists ORDER BY id LIMIT 2)`,
	}
	for _, q := range steps {
		if _, err := e.src.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e.waitCheckpoint(t, ctx)
	sameBuckets(t, e.buckets(t), e.expected(t))

	// A burst of transactions moving the same rows back and forth between
	// two lists: batches queue up, so a batch's stored state is read ahead
	// while earlier batches that move the same rows are still being
	// written — and the state read then looks the same as the batch's own
	// (the list of two moves ago), which must not spare the REMOVE from
	// the list in between.
	for i := range 150 {
		if _, err := e.src.Exec(ctx, `UPDATE todos SET list_id = (SELECT id FROM lists ORDER BY id OFFSET $1 LIMIT 1)
			WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 10 OFFSET $2)`, i%2, i%3); err != nil {
			t.Fatal(err)
		}
	}
	e.waitCheckpoint(t, ctx)
	sameBuckets(t, e.buckets(t), e.expected(t))
	st := e.store.Writes().Stats()
	if st.StateReadAhead == 0 {
		t.Errorf("no stream row was written with its stored state read ahead (stats %+v)", st)
	}
	t.Logf("stream rows with state read ahead: %d, read again: %d", st.StateReadAhead, st.StateReadAgain)

	if _, err := e.src.Exec(ctx, `TRUNCATE todos`); err != nil {
		t.Fatal(err)
	}
	e.waitCheckpoint(t, ctx)
	sameBuckets(t, e.buckets(t), e.expected(t))

	// The slot never confirms more than storage durably recorded. Slots
	// are cluster-wide and the package's tests run in parallel, so the
	// group's own slot is read by name. (Reading any slot was the cause of
	// this check's flake, "slot confirmed 0/4E9A0A8 beyond the stored
	// stream position 0/4E99CA8" at b61716f: another test's slot, 1 KiB
	// of WAL further on; b3ebaa8 filtered by database, and the name is
	// exact.)
	// The replicator still runs: the slot is read first, storage second.
	var confirmed, stored, slot string
	if err := e.store.Pool().QueryRow(ctx, `SELECT slot_name FROM groups`).Scan(&slot); err != nil {
		t.Fatal(err)
	}
	if err := e.src.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Pool().QueryRow(ctx, `SELECT stream_lsn::text FROM groups`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := e.src.QueryRow(ctx, `SELECT $1::pg_lsn <= $2::pg_lsn`, confirmed, stored).Scan(&ok); err != nil || !ok {
		t.Fatalf("slot confirmed %s beyond the stored stream position %s", confirmed, stored)
	}
	cancel()
	if err := <-errc; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// slowSink delays every write, like storage under heavy load.
type slowSink struct {
	sinks.Sink
	delay time.Duration
}

func (s slowSink) Writer(ctx context.Context, i int) (sinks.Writer, error) {
	w, err := s.Sink.Writer(ctx, i)
	if err != nil {
		return nil, err
	}
	return pipeline.WriterFunc[model.Change, sinks.Position](func(ctx context.Context, b sinks.Batch) error {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		return w.Write(ctx, b)
	}), nil
}

// TestSnapshotSurvivesSlowStorage makes every flush take longer than the
// source's idle timeouts and the snapshot socket timeout: the snapshot
// still completes, because no source statement or transaction stays open
// while storage is busy.
func TestSnapshotSurvivesSlowStorage(t *testing.T) {
	t.Parallel()
	// More chunks than the pipeline buffers, so the reader waits on storage
	// between chunks for longer than the server tolerates idle sessions.
	e := newEnv(t, todos.Size{Lists: 5, Todos: 1000, Seed: 4}, `
replication:
  snapshot: {chunk_rows: 100}
`)
	e.cfg.Source.SnapshotSocketTimeout = time.Second
	ctx := context.Background()
	var db string
	if err := e.src.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"idle_in_transaction_session_timeout = '1s'", "idle_session_timeout = '1s'"} {
		if _, err := e.src.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET "+q); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	var logs logbuf.Buffer
	r := New(Options{Config: e.cfg, Store: e.store, OnSnapshotDone: func(int) { close(done) },
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		WrapSink: func(s sinks.Sink) sinks.Sink { return slowSink{Sink: s, delay: 1200 * time.Millisecond} }})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	select {
	case <-done:
	case err := <-errc:
		t.Fatalf("replicator stopped before the snapshot was done: %v", err)
	}
	cancel()
	<-errc
	sameBuckets(t, e.buckets(t), e.expected(t))
	// Completing by reconnecting after the server dropped an idle
	// connection would not count: nothing may have been retried.
	if strings.Contains(logs.String(), "retrying") {
		t.Fatalf("the snapshot needed retries:\n%s", logs.String())
	}
}
