package schema

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// renameEnv is a running `syncpipe run` replicating the tables items and
// notes into one global bucket, caught up, for the tests of tables that
// are renamed, moved to another schema or re-created under it.
type renameEnv struct {
	*harness.Env
	ctx    context.Context
	client *harness.SyncClient      // syncing from the start
	seen   *harness.CheckpointWatch // what it holds
}

func newRenameEnv(t *testing.T, ctx context.Context) *renameEnv {
	e := &renameEnv{Env: harness.New(t, harness.Options{Rules: "bucket_definitions:\n  global:\n    data:\n      - SELECT * FROM items\n      - SELECT * FROM notes\n"}), ctx: ctx}
	e.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, a text NOT NULL)`)
	e.Exec(ctx, `CREATE TABLE notes (id int PRIMARY KEY, a text NOT NULL)`)
	e.Exec(ctx, `INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 200) i`)
	e.Exec(ctx, `INSERT INTO notes SELECT i, 'note ' || i FROM generate_series(1, 50) i`)
	e.Start()
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, time.Minute, e.want)
	e.seen = &harness.CheckpointWatch{}
	e.client = e.Sync("alice", e.seen.Observe)
	return e
}

// want is what the source's items and notes put in storage.
func (e *renameEnv) want() bucketcheck.State { return globalRows(e.ctx, e.Env, "items", "notes") }

// get fetches a path of the sync API (the error's text when it does not
// answer).
func (e *renameEnv) get(path string) string {
	_, body := harness.Get(e.ctx, e.API, path, "")
	return body
}

// missingShown waits until status, /healthz (degraded) and the failing
// units metric show that items is missing, and returns the status.
func (e *renameEnv) missingShown() string {
	e.T.Helper()
	var status string
	e.WaitFor(e.ctx, "syncpipe status to show the missing table", func() bool {
		_, status, _ = harness.Run(e.T, e.ctx, "status", "--config", e.Config)
		return strings.Contains(status, "public.items") && strings.Contains(status, "does not exist")
	})
	e.WaitFor(e.ctx, "/healthz to say degraded, naming the table", func() bool {
		h := e.get("/healthz")
		return strings.Contains(h, "degraded") && strings.Contains(h, "public.items")
	})
	e.WaitFor(e.ctx, "a failing unit in /metrics", func() bool {
		return strings.Contains(e.get("/metrics"), `syncpipe_replication_failing_units{`)
	})
	return status
}

// recovered checks that storage and the sync client equal the source
// within 60 s and that /healthz is ok again, then that later changes
// apply, in the same group.
func (e *renameEnv) recovered() {
	e.T.Helper()
	e.Converge(e.ctx, time.Minute, e.want)
	wctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	e.WaitFor(wctx, "the sync client to hold what the source does", e.seen.Holds(e.want()))
	if f := e.client.Failures(); len(f) > 0 {
		e.T.Fatalf("the sync client saw protocol errors: %v", f)
	}
	e.WaitFor(e.ctx, "/healthz to be ok again", func() bool { return strings.Contains(e.get("/healthz"), `"status":"ok"`) })
	e.Exec(e.ctx, `UPDATE items SET a = 'later' WHERE id IN (SELECT id FROM items ORDER BY id LIMIT 2)`)
	e.Exec(e.ctx, `DELETE FROM items WHERE id = (SELECT max(id) FROM items)`)
	e.WaitCaughtUp(e.ctx)
	e.Converge(e.ctx, time.Minute, e.want)
	if ids, states := e.Groups(e.ctx); len(ids) != 1 || states[0] != "ACTIVE" {
		e.T.Fatalf("groups %v %v: a renamed, moved or re-created table must not replace the group", ids, states)
	}
	e.Alive()
}

// away takes items away with the statement away, changes it there under
// the name at (updates, inserts, deletes), checks that the problem shows
// while it is away, with the remedy, and brings it back with back.
func (e *renameEnv) away(away, at, back string) {
	e.T.Helper()
	e.Exec(e.ctx, away)
	e.Exec(e.ctx, `UPDATE `+at+` SET a = a || ' while away' WHERE id <= 20`)
	e.Exec(e.ctx, `INSERT INTO `+at+` SELECT i, 'added while away ' || i FROM generate_series(1001, 1010) i`)
	e.Exec(e.ctx, `DELETE FROM `+at+` WHERE id BETWEEN 30 AND 35`)
	e.Exec(e.ctx, `UPDATE notes SET a = a || ' meanwhile' WHERE id <= 5`)
	status := e.missingShown()
	if !strings.Contains(status, "RENAME TO") || !strings.Contains(status, "SET SCHEMA") {
		e.T.Errorf("the status of a missing table does not say how to fix it:\n%s", status)
	}
	e.Exec(e.ctx, back)
	e.recovered()
}

// TestTableRenamedAndBack renames a table the rules name under a running
// `syncpipe run`, writes to it under the new name, and renames it back:
// the changes made meanwhile must reach storage (the stream follows the
// table by its OID), while it is away status, /healthz and the metric
// must show the problem with its remedy, and once it is back storage must
// equal the source within 60 s. The same, all in one transaction, for a
// rename too quick for the catalog check to see.
func TestTableRenamedAndBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newRenameEnv(t, ctx)

	e.Exec(ctx, `BEGIN`)
	e.Exec(ctx, `ALTER TABLE items RENAME TO items_tx`)
	e.Exec(ctx, `UPDATE items_tx SET a = a || ' in the transaction' WHERE id BETWEEN 100 AND 110`)
	e.Exec(ctx, `INSERT INTO items_tx SELECT i, 'added in the transaction' FROM generate_series(2001, 2005) i`)
	e.Exec(ctx, `ALTER TABLE items_tx RENAME TO items`)
	e.Exec(ctx, `COMMIT`)
	e.Converge(ctx, time.Minute, e.want)

	e.away(`ALTER TABLE items RENAME TO items_old`, "items_old", `ALTER TABLE items_old RENAME TO items`)
}

// TestTableMovedToAnotherSchemaAndBack is TestTableRenamedAndBack for
// ALTER TABLE … SET SCHEMA and back.
func TestTableMovedToAnotherSchemaAndBack(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newRenameEnv(t, ctx)
	e.Exec(ctx, `CREATE SCHEMA other`)
	e.away(`ALTER TABLE items SET SCHEMA other`, "other.items", `ALTER TABLE other.items SET SCHEMA public`)
}

// TestTableDroppedAndRecreated drops a table the rules name under a
// running `syncpipe run` and creates it again with other rows: while it
// is missing the problem must show; then storage must hold the new
// table's rows and none of the old one's within 60 s, in the same group
// (syncpipe adds the new table to the publication it manages and re-reads
// it).
func TestTableDroppedAndRecreated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newRenameEnv(t, ctx)
	e.Exec(ctx, `DROP TABLE items`)
	e.missingShown()
	// Rows of another key range: none of the old table's may stay.
	e.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, a text NOT NULL)`)
	e.Exec(ctx, `INSERT INTO items SELECT i, 'new item ' || i FROM generate_series(5001, 5100) i`)
	e.recovered()
}

// TestSinkPipelineFollowsRenamedTable renames a table a jsonl pipeline
// replicates away, updates a row of it under the new name and renames it
// back: the update must be in the sink (followed by the table's OID, not
// dropped for its name), as must a change made after the rename back.
func TestSinkPipelineFollowsRenamedTable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "audit")
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 3, Todos: 100, Seed: 9},
		Top: fmt.Sprintf(`pipelines:
  - name: main
  - name: audit
    tables: [todos]
    sink: {type: jsonl, settings: {dir: %q}}
`, out),
	})
	e.Start()
	target := e.SourceLSN(ctx)
	e.WaitFor(ctx, "the jsonl stream past "+target, func() bool { return e.JSONLStreamPast(ctx, out, target) })

	var away, after string
	if err := e.Src.QueryRow(ctx, `SELECT min(id::text), max(id::text) FROM todos`).Scan(&away, &after); err != nil {
		t.Fatal(err)
	}
	e.Exec(ctx, `ALTER TABLE todos RENAME TO todos_old`)
	e.Exec(ctx, `UPDATE todos_old SET description = 'changed while renamed' WHERE id = $1`, away)
	e.Exec(ctx, `ALTER TABLE todos_old RENAME TO todos`)
	e.Exec(ctx, `UPDATE todos SET description = 'changed after the rename back' WHERE id = $1`, after)
	target = e.SourceLSN(ctx)
	e.WaitFor(ctx, "the jsonl stream past "+target, func() bool { return e.JSONLStreamPast(ctx, out, target) })

	found := map[string]bool{}
	for _, l := range harness.ReadJSONL(t, filepath.Join(out, "public.todos.jsonl")) {
		for _, p := range l.Puts {
			for _, want := range []string{"changed while renamed", "changed after the rename back"} {
				if strings.Contains(string(p.Data), want) {
					found[want] = true
				}
			}
		}
	}
	if !found["changed while renamed"] || !found["changed after the rename back"] {
		t.Fatalf("the jsonl sink has the changes %v; want the one made while the table was renamed and the one after", found)
	}
	e.Alive()
}

// globalRows is what the rows of the source's tables put in group 1's
// global bucket (rules `SELECT * FROM <table>` for each).
func globalRows(ctx context.Context, e *harness.Env, tables ...string) bucketcheck.State {
	e.T.Helper()
	st := bucketcheck.State{"1#global[]": {}}
	for _, tb := range tables {
		rows, err := e.Src.Query(ctx, fmt.Sprintf(`SELECT id::text, row_to_json(x)::text FROM %s x`, tb))
		if err != nil {
			e.T.Fatal(err)
		}
		for rows.Next() {
			var id, data string
			if err := rows.Scan(&id, &data); err != nil {
				e.T.Fatal(err)
			}
			st["1#global[]"][tb+"/"+id] = data
		}
		rows.Close()
	}
	return st
}
