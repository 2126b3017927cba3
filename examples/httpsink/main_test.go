package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

func TestMain(m *testing.M) { harness.Main(m) }

// binary is the example's program, built once (go build, -race when the
// tests run with it) by the e2e harness.
func binary(t *testing.T) string { return harness.BinaryOf(t, "./examples/httpsink") }

// start runs httpsink with args as a child process, killed when the test
// ends.
func start(t *testing.T, args ...string) *harness.Proc {
	t.Helper()
	return harness.Start(t, harness.ProcConfig{Binary: binary(t), Args: args})
}

// check runs `httpsink -check -config path` and returns its exit code and
// output.
func check(t *testing.T, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := harness.RunWith(t, ctx, harness.ProcConfig{Binary: binary(t), Args: []string{"-check", "-config", path}})
	return code, stdout + stderr
}

// TestCheck runs the example's config check: it accepts the http sink
// with good settings in a config without storage, and reports a mistyped
// one at its file position.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := writeConfig(t, dir, "good.yaml", "postgres://app@127.0.0.1:1/app", "http://127.0.0.1:1/", "")
	if code, out := check(t, good); code != 0 || !strings.Contains(out, good+": ok (1 pipeline(s))") {
		t.Fatalf("check of a good config: exit %d:\n%s", code, out)
	}
	bad := writeConfig(t, dir, "bad.yaml", "postgres://app@127.0.0.1:1/app", "http://127.0.0.1:1/", "soon")
	yaml, _ := os.ReadFile(bad)
	line, col := position(string(yaml), "timeout:")
	want := fmt.Sprintf(`%s:%d:%d: pipelines[0].sink.settings.timeout: want a duration such as 30s or 5m, got "soon" (sink http)`, bad, line, col)
	if code, out := check(t, bad); code != 2 || !strings.Contains(out, want) {
		t.Fatalf("check of a mistyped timeout: exit %d, want 2 and %q:\n%s", code, want, out)
	}
}

// position returns the 1-based line and column of the first occurrence of
// s in text.
func position(text, s string) (line, col int) {
	for i, l := range strings.Split(text, "\n") {
		if c := strings.Index(l, s); c >= 0 {
			return i + 1, c + 1
		}
	}
	return 0, 0
}

// writeConfig writes a config without storage whose only pipeline, hooks,
// sends the todos table to url through the http sink, its state in
// dir/state; timeout is left out when empty.
func writeConfig(t *testing.T, dir, name, source, url, timeout string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(todos.Rules), 0o644); err != nil {
		t.Fatal(err)
	}
	settings := fmt.Sprintf("url: %q\n        progress_file: %q", url, filepath.Join(dir, "hooks-progress.json"))
	if timeout != "" {
		settings += "\n        timeout: " + timeout
	}
	path := filepath.Join(dir, name)
	yaml := fmt.Sprintf(`source:     {uri: %q}
state_dir:  state
sync_rules: {path: rules.yaml}
replication:
  stream: {batch_max_wait: 20ms}
log: {level: info}
pipelines:
  - name: hooks
    tables: [todos]
    stages: {flush_writers: 2, chunk_rows: 40}
    sink:
      type: http
      settings:
        %s
`, source, settings)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDeliversSnapshotAndStream runs the example's binary, from a config
// with no storage section, against a real PostgreSQL and an HTTP
// receiver: every row of the snapshot arrives, then
// the inserts, updates and deletes committed on the source, although the
// receiver answers 500 to a few POSTs on the way (the program sends those
// batches again, so the one it took before answering arrives twice), and
// then, after a SIGKILL and a restart, the changes made in between and
// nothing else. The receiver keeps, per key, the source position (lsn, i)
// of the change it applied last, which drops changes it already has and
// copes with batches of two writers arriving out of order.
func TestDeliversSnapshotAndStream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srcURI := pgtest.NewDB(t)
	src := pgtest.Connect(t, srcURI)
	if _, err := todos.Load(ctx, src, todos.Size{Lists: 4, Todos: 300, Seed: 11}); err != nil {
		t.Fatal(err)
	}
	recv := newReceiver()
	srv := httptest.NewServer(recv)
	defer srv.Close()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "httpsink.yaml", srcURI, srv.URL+"/changes", "")

	if code, out := check(t, cfg); code != 0 {
		t.Fatalf("check: exit %d:\n%s", code, out)
	}
	run := start(t, "-config", cfg)
	want := sourceRows(ctx, t, src)
	recv.waitFor(t, ctx, run, "every snapshot row", func() string { return recv.diff(want) })

	// From here the receiver fails the next three POSTs, the first after
	// applying it (an answer lost on the way): the batches must arrive all
	// the same, the first one twice.
	recv.fail(3)
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	sql := func(sql string, args ...any) {
		t.Helper()
		if _, err := src.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	sql(`INSERT INTO todos (id, list_id, description) SELECT gen_random_uuid(), list_id, 'inserted ' || n
		FROM (SELECT list_id FROM todos LIMIT 1) l, generate_series(1, 3) n`)
	for i, id := range ids[:5] {
		sql(`UPDATE todos SET description = $2, completed = true WHERE id = $1`, id, fmt.Sprintf("updated %d", i))
	}
	sql(`UPDATE todos SET description = description || ' (twice)' WHERE id = $1`, ids[0])
	sql(`DELETE FROM todos WHERE id = ANY($1)`, ids[5:9])
	tx, err := src.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[9:40] { // one transaction, several changes
		if _, err := tx.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want = sourceRows(ctx, t, src)
	recv.waitFor(t, ctx, run, "the stream's inserts, updates and deletes", func() string { return recv.diff(want) })
	progress := filepath.Join(dir, "hooks-progress.json")
	waitCommitted(t, ctx, run, progress, recv.streamedLSN())

	// A crash, changes while the program is down, a restart: the stream
	// resumes from the progress file, so only the new changes arrive.
	recv.mu.Lock()
	dupsBefore := recv.dups
	recv.mu.Unlock()
	run.Kill()
	sql(`UPDATE todos SET description = 'while down' WHERE id = ANY($1)`, ids[40:45])
	sql(`DELETE FROM todos WHERE id = $1`, ids[45])
	run = start(t, "-config", cfg)
	want = sourceRows(ctx, t, src)
	recv.waitFor(t, ctx, run, "the changes made while the program was down", func() string { return recv.diff(want) })
	waitCommitted(t, ctx, run, progress, recv.streamedLSN())

	recv.mu.Lock()
	failed, dups, applied := recv.failed, recv.dups, recv.applied
	deleted := 0
	for _, id := range append(slices.Clone(ids[5:9]), ids[45]) {
		if recv.deleted[recv.keyOf[id]] {
			deleted++
		}
	}
	recv.mu.Unlock()
	if failed != 3 {
		t.Errorf("the receiver answered 500 to %d POSTs, want 3", failed)
	}
	if dupsBefore == 0 {
		t.Error("no change arrived twice, although the answer to one POST was lost")
	}
	if dups != dupsBefore {
		t.Errorf("%d changes arrived again after the restart; want none: the stream resumes after the committed position", dups-dupsBefore)
	}
	if deleted != 5 {
		t.Errorf("%d of the 5 deleted rows arrived as deletes of their key", deleted)
	}
	t.Logf("%d changes applied, %d streamed changes dropped as already applied", applied, dups)

	// The pipeline's state is in its state file, next to the config: no
	// storage database was involved.
	b, err := os.ReadFile(filepath.Join(dir, "state", "hooks.state.json"))
	var state struct {
		Version      int  `json:"version"`
		SnapshotDone bool `json:"snapshot_done"`
	}
	if err != nil || json.Unmarshal(b, &state) != nil || state.Version != 1 || !state.SnapshotDone {
		t.Errorf("state file: %s (%v); want version 1 (resumed, not restarted), snapshot done", b, err)
	}
	if err := run.Stop(); err != nil {
		t.Fatalf("httpsink after SIGTERM: %v", err)
	}
}

// waitCommitted waits until the progress file holds a stream position at
// or past lsn outside any transaction: the program committed every batch
// up to the transaction committed at lsn.
func waitCommitted(t *testing.T, ctx context.Context, p *harness.Proc, path string, lsn uint64) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var f struct {
			Stream *struct {
				LSN    uint64 `json:"lsn"`
				TxnLSN uint64 `json:"txn_lsn"`
			} `json:"stream"`
		}
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &f) == nil && f.Stream != nil && f.Stream.LSN >= lsn && f.Stream.TxnLSN == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-p.Exited():
			t.Fatalf("httpsink exited (%v) before committing the stream past %X", p.Err(), lsn)
		case <-ctx.Done():
			t.Fatalf("the stream was not committed past %X: progress file %s (%v)", lsn, b, err)
		}
	}
}

// row is what the test compares of a todo: the receiver's view of the put
// data and the source's columns alike. The sync rules give booleans as 0
// or 1, as PowerSync does.
type row struct {
	Description string `json:"description"`
	Completed   int    `json:"completed"`
}

// sourceRows reads every todo of the source by id.
func sourceRows(ctx context.Context, t *testing.T, src *pgx.Conn) map[string]row {
	t.Helper()
	rows, err := src.Query(ctx, "SELECT id::text, description, completed::int FROM todos")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]row{}
	var id string
	var r row
	_, err = pgx.ForEachRow(rows, []any{&id, &r.Description, &r.Completed}, func() error {
		out[id] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// receiver is an HTTP endpoint for the sink, applying changes as the
// example's README says: a snapshot row (no lsn) is an upsert unless a
// streamed change of the row was applied, and a streamed change is applied
// only when its (lsn, i) is after the one applied last for its key. It can
// be told to fail the next POSTs.
type receiver struct {
	mu      sync.Mutex
	failing int  // POSTs still to answer with 500
	lose    bool // apply the next failing POST before answering 500
	failed  int
	applied int
	dups    int                  // streamed changes dropped: delivered before, or older than the row
	err     error                // the first POST the receiver could not read
	last    map[string][2]uint64 // key → (lsn, i) of the streamed change applied last
	rows    map[string]putRow    // key → the live row
	keyOf   map[string]string    // row id → key
	deleted map[string]bool      // keys whose last change was a delete
	posted  chan struct{}        // signalled after every POST
}

type putRow struct {
	id string
	row
}

// change is one element of a POST's "changes", as the jsonl sink encodes
// it.
type change struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	LSN  string `json:"lsn"`
	I    uint64 `json:"i"`
	Puts []struct {
		ObjectID string          `json:"object_id"`
		Data     json.RawMessage `json:"data"`
	} `json:"puts"`
}

func newReceiver() *receiver {
	return &receiver{last: map[string][2]uint64{}, rows: map[string]putRow{}, keyOf: map[string]string{},
		deleted: map[string]bool{}, posted: make(chan struct{}, 1)}
}

// fail makes the receiver answer 500 to the next n POSTs; the first of
// them is applied all the same, as when an answer is lost on the way.
func (r *receiver) fail(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing, r.lose = n, true
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	defer func() {
		select {
		case r.posted <- struct{}{}:
		default:
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	var body struct{ Changes []change }
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil || req.Method != http.MethodPost {
		r.err = cmp.Or(r.err, fmt.Errorf("%s with a body that is not {\"changes\":[…]}: %v", req.Method, err))
		http.Error(w, r.err.Error(), http.StatusBadRequest)
		return
	}
	if r.failing > 0 {
		r.failing--
		r.failed++
		if r.lose {
			r.lose = false
			_ = r.apply(body.Changes) // an error is kept in r.err
		}
		http.Error(w, "try again later", http.StatusInternalServerError)
		return
	}
	if err := r.apply(body.Changes); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

// apply applies changes in order; r.mu is held.
func (r *receiver) apply(changes []change) error {
	for _, c := range changes {
		last, streamed := r.last[c.Key]
		if pos := [2]uint64{parseLSN(c.LSN), c.I}; pos[0] != 0 {
			if streamed && (pos[0] < last[0] || pos[0] == last[0] && pos[1] <= last[1]) {
				r.dups++
				continue
			}
			r.last[c.Key] = pos
		} else if streamed {
			continue // a snapshot row re-sent after the stream changed it
		}
		r.applied++
		if c.Kind == "delete" || len(c.Puts) == 0 {
			delete(r.rows, c.Key)
			r.deleted[c.Key] = true
			continue
		}
		var data row
		if err := json.Unmarshal(c.Puts[0].Data, &data); err != nil {
			r.err = cmp.Or(r.err, fmt.Errorf("row data %s: %w", c.Puts[0].Data, err))
			return r.err
		}
		r.rows[c.Key] = putRow{c.Puts[0].ObjectID, data}
		r.keyOf[c.Puts[0].ObjectID] = c.Key
		delete(r.deleted, c.Key)
	}
	return nil
}

// parseLSN reads PostgreSQL's text form of an LSN, 0/16B3748; "" (a
// snapshot row) is 0.
func parseLSN(s string) uint64 {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0
	}
	h, _ := strconv.ParseUint(hi, 16, 32)
	l, _ := strconv.ParseUint(lo, 16, 32)
	return h<<32 | l
}

// diff describes the first difference between the receiver's live rows
// and want, by row id; "" when they are the same.
func (r *receiver) diff(want map[string]row) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err.Error()
	}
	got := map[string]row{}
	for _, pr := range r.rows {
		got[pr.id] = pr.row
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			return fmt.Sprintf("row %s is %+v (present %v), want %+v", id, g, ok, w)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			return fmt.Sprintf("row %s is not in the source", id)
		}
	}
	return ""
}

// waitFor returns once diff reports no difference, checking after every
// POST; it fails the test when the program exits or ctx ends first.
func (r *receiver) waitFor(t *testing.T, ctx context.Context, p *harness.Proc, what string, diff func() string) {
	t.Helper()
	for d := diff(); d != ""; d = diff() {
		if r.failedToRead() {
			t.Fatalf("before %s arrived: %s", what, d)
		}
		select {
		case <-r.posted:
		case <-p.Exited():
			t.Fatalf("httpsink exited (%v) before %s arrived: %s", p.Err(), what, d)
		case <-ctx.Done():
			t.Fatalf("%s did not arrive: %s", what, d)
		}
	}
}

// streamedLSN is the highest transaction LSN of the streamed changes
// applied.
func (r *receiver) streamedLSN() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lsn uint64
	for _, pos := range r.last {
		lsn = max(lsn, pos[0])
	}
	return lsn
}

// failedToRead reports whether a POST could not be read: no retry helps.
func (r *receiver) failedToRead() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err != nil
}
