package pipelines

import (
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

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/longtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

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
// a stream batch, and SIGKILLs the process five times at random points
// (ten with SYNCPIPE_TEST_LONG: longtest).
// Every committed change must be in the jsonl file exactly once, every
// row the snapshot read once, and bucket storage must converge too.
func TestRunTwoPipelinesJSONLExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "audit")
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 30, Todos: 4000, Seed: 5},
		Top: fmt.Sprintf(`pipelines:
  - name: main
    tables: [lists, todos]
  - name: audit
    tables: [todos]
    stages: {flush_writers: 3, eval_workers: 2, decode_workers: 2, chunk_rows: 50, batch_max_rows: 200}
    sink: {type: jsonl, settings: {dir: %q}}
`, out),
	})
	seed := longtest.Seed(t)
	initial := map[string]bool{}
	rows, err := e.Src.Query(ctx, "SELECT id::text FROM todos")
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
	e.Start()
	// The churn starts once the pipeline's slot has its consistent point:
	// from then on every committed change is in the slot. A slot is listed
	// while it is still being created, and a change committed before its
	// consistent point is only in the snapshot (CI once lost 21 of them
	// to the listing alone, with the source busy).
	e.WaitFor(ctx, "the audit pipeline's slot at its consistent point", func() bool {
		var n int
		err := e.Src.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots
			WHERE slot_name = 'syncpipe_p_audit' AND confirmed_flush_lsn IS NOT NULL`).Scan(&n)
		return err == nil && n == 1
	})
	var mu sync.Mutex
	var ops []churnOp
	committed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ops)
	}
	stop := make(chan struct{})
	stopChurn := sync.OnceFunc(func() { close(stop) })
	defer stopChurn()
	churned := make(chan error, 1)
	go func() { churned <- churnTodos(ctx, e.SourceURI, seed, ids, stop, &mu, &ops) }()

	// The kill points are random (longtest.Seed), and each waits for a
	// condition, not a pause: the process has written to the jsonl file
	// (it is longer than when the process started) and the churn committed
	// 1–60 more changes. So every kill lands in the work — the snapshot,
	// stream batches, the large transaction — never in start-up only,
	// however slow -race on busy cores makes the children. The last kill
	// also waits for the large transaction to be committed.
	rng := rand.New(rand.NewPCG(seed, 7))
	file := filepath.Join(out, "public.todos.jsonl")
	kills := longtest.Pick(5, 10) // 5: about 30 s under -race
	for k := range kills {
		size0, ops0, more := fileSize(file), committed(), 1+rng.IntN(60)
		if k == kills-1 {
			more = max(more, largeTxnRows+1-ops0)
		}
		e.WaitFor(ctx, fmt.Sprintf("kill point %d: the jsonl file past %d bytes and %d more committed changes", k+1, size0, more), func() bool {
			return fileSize(file) > size0 && committed() >= ops0+more
		})
		e.Alive()
		e.Kill()
		t.Logf("SIGKILL %d after %d committed changes", k+1, committed())
		e.Start()
	}
	stopChurn()
	if err := <-churned; err != nil {
		t.Fatal(err)
	}
	target := e.SourceLSN(ctx)
	e.WaitFor(ctx, "the jsonl stream past "+target, func() bool { return e.JSONLStreamPast(ctx, out, target) })
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	e.StopAll()
	_, status, _ := harness.Run(t, ctx, "status", "--config", e.Config)
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

	lines := harness.ReadJSONL(t, filepath.Join(out, "public.todos.jsonl"))
	checkExactlyOnce(t, lines, initial, ops)
}

// fileSize is the size of the file at path, 0 when there is none.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// largeTxnRows is the size of the churn's large transaction.
const largeTxnRows = 1500

// churnTodos commits row changes until stop closes: single-row inserts,
// updates and deletes, and once a transaction updating 1500 rows (more
// than a stream batch of 200). Each committed change is recorded in ops.
// Its choices follow seed.
func churnTodos(ctx context.Context, uri string, seed uint64, ids []string, stop <-chan struct{}, mu *sync.Mutex, ops *[]churnOp) error {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(seed, 3))
	// The churn is paced, not synchronised: at most one transaction every
	// 5 ms, a few hundred changes a second.
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
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
			for _, id := range live[:largeTxnRows] {
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
		select {
		case <-stop:
			return nil
		case <-pace.C:
		}
	}
}

// checkExactlyOnce compares the jsonl lines with what the source did:
// each initial row read by the snapshot once (or deleted by the churn
// first), no stream change twice (by transaction LSN, index and kind), and
// every change the churn committed in the stream lines exactly once.
func checkExactlyOnce(t *testing.T, lines []harness.JSONLLine, initial map[string]bool, ops []churnOp) {
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
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Replication slots are the cluster's, and a sink's is named after
	// its pipeline: another slot prefix keeps this audit pipeline off
	// TestRunTwoPipelinesJSONLExactlyOnce's syncpipe_p_audit, which runs
	// in parallel on the same cluster.
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 4, Todos: 200, Seed: 8},
		Env: []string{"SYNCPIPE_SOURCE__SLOT_PREFIX=versions_"}})
	out := filepath.Join(e.Dir, "audit")
	base, err := os.ReadFile(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	configure := func(fsync bool) {
		cfg := fmt.Sprintf("%spipelines:\n  - name: audit\n    tables: [todos]\n    sink: {type: jsonl, settings: {dir: %q, fsync: %v}}\n", base, out, fsync)
		if err := os.WriteFile(e.Config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(out, "public.todos.jsonl")
	version := func() (v int) {
		if err := e.Storage.QueryRow(ctx, "SELECT version FROM syncpipe.sink_pipelines WHERE name = 'audit'").Scan(&v); err != nil {
			return 0
		}
		return v
	}
	// runUntil waits for the pipeline version first: until the new process
	// has renewed the pipeline, the old version's file and progress are
	// still in place and would satisfy the other waits at once.
	runUntil := func(wantVersion, lines int) {
		e.Start()
		e.WaitFor(ctx, fmt.Sprintf("pipeline version %d", wantVersion), func() bool { return version() == wantVersion })
		e.WaitFor(ctx, fmt.Sprintf("%d lines", lines), func() bool {
			b, err := os.ReadFile(file)
			return err == nil && bytes.Count(b, []byte("\n")) >= lines
		})
		target := e.SourceLSN(ctx)
		e.WaitFor(ctx, "the stream past "+target, func() bool { return e.JSONLStreamPast(ctx, out, target) })
		e.StopAll()
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
	if n := len(harness.ReadJSONL(t, file)); n != 200 {
		t.Errorf("version 2 holds %d lines; want the 200 rows snapshotted afresh", n)
	}
	e.Exec(ctx, "UPDATE todos SET completed = true WHERE id IN (SELECT id FROM todos LIMIT 5)")
	runUntil(2, 205) // same config: same version, only the 5 changes added
	if v := version(); v != 2 {
		t.Errorf("version %d after a restart with the same config; want 2", v)
	}
	if n := len(harness.ReadJSONL(t, file)); n != 205 {
		t.Errorf("%d lines after the restart; want 205", n)
	}
	// The rules' lists table is carried by no pipeline, yet it exists.
	if e.Logged("does not exist in the source") {
		t.Errorf("run warned about a rule table no pipeline carries:\n%s", e.TailLogs(4<<10))
	}
}
