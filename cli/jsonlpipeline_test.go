package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// jsonlLine is what the test reads of a jsonl sink line.
type jsonlLine struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	LSN  string `json:"lsn"`
	I    int64  `json:"i"`
	Puts []struct {
		ObjectID string          `json:"object_id"`
		Data     json.RawMessage `json:"data"`
	} `json:"puts"`
}

// churnOp is one row change the churn committed: the row, what happened
// to it, and the revision it wrote (description "rev N").
type churnOp struct {
	id     string
	delete bool
	rev    int
}

// TestRunTwoPipelinesJSONLExactlyOnce runs `syncpipe run` with two
// pipelines over the same source — bucketstore for lists and todos, and
// jsonl for todos with three flush writers and two eval workers — while a
// churn commits inserts, updates, deletes and one transaction larger than
// a stream batch, and SIGKILLs the process five times at random points.
// Every committed change must be in the jsonl file exactly once, every
// row the snapshot read once, and bucket storage must converge too.
func TestRunTwoPipelinesJSONLExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 30, Todos: 4000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	initial := map[string]bool{}
	rows, err := e.src.Query(ctx, "SELECT id::text FROM todos")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		initial[id] = true
	}
	out := filepath.Join(e.dir, "audit")
	appendConfig(t, e.config, fmt.Sprintf(`pipelines:
  - name: main
    tables: [lists, todos]
  - name: audit
    tables: [todos]
    stages: {flush_writers: 3, eval_workers: 2, decode_workers: 2, chunk_rows: 50, batch_max_rows: 200}
    sink: {type: jsonl, settings: {dir: %q}}
`, out))

	e.start()
	// The churn starts once the pipeline's slot exists: from then on every
	// committed change is in the slot.
	e.waitFor(ctx, "the audit pipeline's slot", func() bool {
		var n int
		err := e.src.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'syncpipe_p_audit'`).Scan(&n)
		return err == nil && n == 1
	})
	var mu sync.Mutex
	var ops []churnOp
	stop := make(chan struct{})
	churned := make(chan error, 1)
	go func() { churned <- churnTodos(ctx, e.srcURI, ids, stop, &mu, &ops) }()

	rng := rand.New(rand.NewPCG(7, 7))
	for k := range 5 {
		time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
		e.alive()
		e.kill()
		t.Logf("SIGKILL %d", k+1)
		e.start()
	}
	close(stop)
	if err := <-churned; err != nil {
		t.Fatal(err)
	}
	target := e.sourceLSN(ctx)
	e.waitFor(ctx, "the jsonl stream past "+target, func() bool { return jsonlStreamPast(ctx, e, out, target) })
	e.waitCaughtUp(ctx)
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	e.stop()
	_, status, _ := runCLI(t, "status", "--config", e.config)
	var audit string
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "audit ") {
			audit = l
		}
	}
	if f := strings.Fields(audit); len(f) < 7 || f[1] != "jsonl" || f[2] != "todos" || f[4] != "done" || !strings.Contains(f[5], "/") {
		t.Errorf("status shows the audit pipeline as %q; want sink jsonl, tables todos, snapshot done, a stream LSN:\n%s", audit, status)
	}
	if !strings.Contains(status, "main ") || !strings.Contains(status, "bucketstore") {
		t.Errorf("status does not show the main pipeline:\n%s", status)
	}

	lines := readJSONL(t, filepath.Join(out, "public.todos.jsonl"))
	checkExactlyOnce(t, lines, initial, ops)
}

// appendConfig adds YAML to the config file.
func appendConfig(t *testing.T, path, yaml string) {
	t.Helper()
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(cfg, yaml...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// jsonlStreamPast reports whether the sink's committed stream position is
// at or past lsn.
func jsonlStreamPast(ctx context.Context, e *streamEnv, dir, lsn string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "_progress.json"))
	if err != nil {
		return false
	}
	var p struct {
		Stream *struct {
			LSN uint64 `json:"lsn"`
		} `json:"stream"`
	}
	if json.Unmarshal(b, &p) != nil || p.Stream == nil {
		return false
	}
	var past bool
	err = e.src.QueryRow(ctx, "SELECT $1::pg_lsn >= $2::pg_lsn", fmt.Sprintf("%X/%X", p.Stream.LSN>>32, uint32(p.Stream.LSN)), lsn).Scan(&past)
	return err == nil && past
}

// churnTodos commits row changes until stop closes: single-row inserts,
// updates and deletes, and once a transaction updating 1500 rows (more
// than a stream batch of 200). Each committed change is recorded in ops.
func churnTodos(ctx context.Context, uri string, ids []string, stop <-chan struct{}, mu *sync.Mutex, ops *[]churnOp) error {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(3, 3))
	live := append([]string(nil), ids...)
	rev := 0
	for n := 0; ; n++ {
		select {
		case <-stop:
			return nil
		default:
		}
		var batch []churnOp
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		switch {
		case n == 40: // the large transaction
			for _, id := range live[:1500] {
				rev++
				batch = append(batch, churnOp{id: id, rev: rev})
				if _, err := tx.Exec(ctx, "UPDATE todos SET description = $2 WHERE id = $1", id, fmt.Sprintf("rev %d", rev)); err != nil {
					return err
				}
			}
		case rng.IntN(4) == 0 && len(live) > 2000:
			i := rng.IntN(len(live))
			id := live[i]
			live = append(live[:i], live[i+1:]...)
			batch = append(batch, churnOp{id: id, delete: true})
			if _, err := tx.Exec(ctx, "DELETE FROM todos WHERE id = $1", id); err != nil {
				return err
			}
		case rng.IntN(3) == 0:
			rev++
			var id string
			if err := tx.QueryRow(ctx, `INSERT INTO todos (id, list_id, description)
				SELECT gen_random_uuid(), list_id, $1 FROM todos LIMIT 1 RETURNING id::text`, fmt.Sprintf("rev %d", rev)).Scan(&id); err != nil {
				return err
			}
			live = append(live, id)
			batch = append(batch, churnOp{id: id, rev: rev})
		default:
			for range 1 + rng.IntN(5) {
				rev++
				id := live[rng.IntN(len(live))]
				batch = append(batch, churnOp{id: id, rev: rev})
				if _, err := tx.Exec(ctx, "UPDATE todos SET description = $2 WHERE id = $1", id, fmt.Sprintf("rev %d", rev)); err != nil {
					return err
				}
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		mu.Lock()
		*ops = append(*ops, batch...)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // pace: a few hundred changes a second
	}
}

func readJSONL(t *testing.T, path string) []jsonlLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []jsonlLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var l jsonlLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s line %d: %v: %s", path, n, err, sc.Bytes())
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkExactlyOnce compares the jsonl lines with what the source did:
// each initial row read by the snapshot once (or deleted by the churn
// first), no stream change twice (by transaction LSN, index and kind), and
// every change the churn committed in the stream lines exactly once.
func checkExactlyOnce(t *testing.T, lines []jsonlLine, initial map[string]bool, ops []churnOp) {
	t.Helper()
	idOf := map[string]string{} // replica key → row id, from upserts
	snap := map[string]int{}    // row id → snapshot lines
	streamPos := map[string]int{}
	upserts := map[string]int{} // "id rev N" → stream lines
	deletes := map[string]int{} // key → stream delete lines
	for _, l := range lines {
		var desc string
		if len(l.Puts) > 0 {
			idOf[l.Key] = l.Puts[0].ObjectID
			var d struct {
				Description string `json:"description"`
			}
			_ = json.Unmarshal(l.Puts[0].Data, &d)
			desc = d.Description
		}
		if l.LSN == "" {
			if l.Kind != "upsert" || len(l.Puts) == 0 {
				t.Fatalf("snapshot line that is no upsert: %+v", l)
			}
			snap[l.Puts[0].ObjectID]++
			continue
		}
		streamPos[fmt.Sprintf("%s/%d/%s", l.LSN, l.I, l.Kind)]++
		if l.Kind == "delete" {
			deletes[l.Key]++
		} else if len(l.Puts) > 0 {
			upserts[l.Puts[0].ObjectID+" "+desc]++
		}
	}
	for pos, n := range streamPos {
		if n > 1 {
			t.Errorf("stream change %s written %d times", pos, n)
		}
	}
	deleted := map[string]bool{}
	for _, op := range ops {
		if op.delete {
			deleted[op.id] = true
		}
	}
	for id := range initial {
		if n := snap[id]; n > 1 || n == 0 && !deleted[id] {
			t.Errorf("initial row %s in %d snapshot lines; want 1", id, n)
		}
	}
	keyOf := map[string]string{}
	for k, id := range idOf {
		keyOf[id] = k
	}
	lost := 0
	for _, op := range ops {
		var n int
		if op.delete {
			k, ok := keyOf[op.id]
			if !ok && initial[op.id] && snap[op.id] == 0 {
				continue // deleted before the snapshot read it: no line knows its key
			}
			n = deletes[k]
		} else {
			n = upserts[fmt.Sprintf("%s rev %d", op.id, op.rev)]
		}
		if n != 1 {
			lost++
			if lost <= 10 {
				t.Errorf("committed change %+v in %d stream lines; want 1", op, n)
			}
		}
	}
	t.Logf("%d lines: %d snapshot rows, %d stream changes; the churn committed %d changes; %d lost or duplicated",
		len(lines), len(snap), len(streamPos), len(ops), lost)
	if len(ops) < 100 {
		t.Errorf("the churn committed only %d changes", len(ops))
	}
}

// TestSinkPipelineChangeIsNewVersion changes a jsonl pipeline's sink
// settings between two runs: the second run starts version 2, moves the
// first version's files aside, and snapshots into fresh files; a third
// run with the same config keeps version 2 and appends only new changes.
func TestSinkPipelineChangeIsNewVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 4, Todos: 200, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "audit")
	base, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	configure := func(fsync bool) {
		cfg := fmt.Sprintf("%spipelines:\n  - name: audit\n    tables: [todos]\n    sink: {type: jsonl, settings: {dir: %q, fsync: %v}}\n", base, out, fsync)
		if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(out, "public.todos.jsonl")
	version := func() (v int) {
		if err := e.storage.QueryRow(ctx, "SELECT version FROM syncpipe.sink_pipelines WHERE name = 'audit'").Scan(&v); err != nil {
			return 0
		}
		return v
	}
	// runUntil waits for the pipeline version first: until the new process
	// has renewed the pipeline, the old version's file and progress are
	// still in place and would satisfy the other waits at once.
	runUntil := func(wantVersion, lines int) {
		e.start()
		e.waitFor(ctx, fmt.Sprintf("pipeline version %d", wantVersion), func() bool { return version() == wantVersion })
		e.waitFor(ctx, fmt.Sprintf("%d lines", lines), func() bool {
			b, err := os.ReadFile(file)
			return err == nil && bytes.Count(b, []byte("\n")) >= lines
		})
		target := e.sourceLSN(ctx)
		e.waitFor(ctx, "the stream past "+target, func() bool { return jsonlStreamPast(ctx, e, out, target) })
		e.stop()
	}

	configure(true)
	runUntil(1, 200)
	if v := version(); v != 1 {
		t.Fatalf("version %d after the first run; want 1", v)
	}
	configure(false) // another sink setting: a new version
	runUntil(2, 200)
	if v := version(); v != 2 {
		t.Fatalf("version %d after the sink settings changed; want 2", v)
	}
	aside, _ := filepath.Glob(filepath.Join(out, "superseded-*", "public.todos.jsonl"))
	if len(aside) != 1 {
		t.Fatalf("the first version's file was not moved aside: %v", aside)
	}
	if n := len(readJSONL(t, file)); n != 200 {
		t.Errorf("version 2 holds %d lines; want the 200 rows snapshotted afresh", n)
	}
	e.exec(ctx, "UPDATE todos SET completed = true WHERE id IN (SELECT id FROM todos LIMIT 5)")
	runUntil(2, 205) // same config: same version, only the 5 changes added
	if v := version(); v != 2 {
		t.Errorf("version %d after a restart with the same config; want 2", v)
	}
	if n := len(readJSONL(t, file)); n != 205 {
		t.Errorf("%d lines after the restart; want 205", n)
	}
	// The rules' lists table is carried by no pipeline, yet it exists.
	if e.logged("does not exist in the source") {
		t.Errorf("run warned about a rule table no pipeline carries:\n%s", e.tailLogs(4<<10))
	}
}
