package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// renameEnv is a running `syncpipe run` replicating the tables items and
// notes into one global bucket, caught up, for the tests of tables that
// are renamed, moved to another schema or re-created under it.
type renameEnv struct {
	*streamEnv
	ctx    context.Context
	client *syncClient  // syncing from the start
	seen   *switchWatch // what it holds
}

func newRenameEnv(t *testing.T, ctx context.Context) *renameEnv {
	e := &renameEnv{streamEnv: newStreamEnv(t, envOptions{rules: "bucket_definitions:\n  global:\n    data:\n      - SELECT * FROM items\n      - SELECT * FROM notes\n"}), ctx: ctx}
	e.exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, a text NOT NULL)`)
	e.exec(ctx, `CREATE TABLE notes (id int PRIMARY KEY, a text NOT NULL)`)
	e.exec(ctx, `INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 200) i`)
	e.exec(ctx, `INSERT INTO notes SELECT i, 'note ' || i FROM generate_series(1, 50) i`)
	e.start()
	e.waitCaughtUp(ctx)
	e.converge(ctx, time.Minute, e.want)
	e.seen = &switchWatch{}
	e.client = newSyncClient(e.api, e.token("alice"), e.seen.observe)
	cctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go e.client.run(cctx)
	return e
}

// want is what the source's items and notes put in storage.
func (e *renameEnv) want() bucketcheck.State {
	st := bucketcheck.State{"1#global[]": {}}
	for _, tb := range []string{"items", "notes"} {
		rows, err := e.src.Query(e.ctx, `SELECT id::text, row_to_json(x)::text FROM `+tb+` x`)
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			var id, data string
			if err := rows.Scan(&id, &data); err != nil {
				e.t.Fatal(err)
			}
			st["1#global[]"][tb+"/"+id] = data
		}
		rows.Close()
	}
	return st
}

// missingShown waits until status, /healthz (degraded) and the failing
// units metric show that items is missing, and returns the status.
func (e *renameEnv) missingShown() string {
	e.t.Helper()
	var status string
	e.waitFor(e.ctx, "syncpipe status to show the missing table", func() bool {
		_, status, _ = runCLI(e.t, "status", "--config", e.config)
		return strings.Contains(status, "public.items") && strings.Contains(status, "does not exist")
	})
	e.waitFor(e.ctx, "/healthz to say degraded, naming the table", func() bool {
		h := e.get(e.ctx, "/healthz")
		return strings.Contains(h, "degraded") && strings.Contains(h, "public.items")
	})
	e.waitFor(e.ctx, "a failing unit in /metrics", func() bool {
		return strings.Contains(e.get(e.ctx, "/metrics"), `syncpipe_replication_failing_units{`)
	})
	return status
}

// recovered checks that storage and the sync client equal the source
// within 60 s and that /healthz is ok again, then that later changes
// apply, in the same group.
func (e *renameEnv) recovered() {
	e.t.Helper()
	e.converge(e.ctx, time.Minute, e.want)
	wctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	e.waitFor(wctx, "the sync client to hold what the source does", e.seen.holds(e.want()))
	if f := e.client.failures(); len(f) > 0 {
		e.t.Fatalf("the sync client saw protocol errors: %v", f)
	}
	e.waitFor(e.ctx, "/healthz to be ok again", func() bool { return strings.Contains(e.get(e.ctx, "/healthz"), `"status":"ok"`) })
	e.exec(e.ctx, `UPDATE items SET a = 'later' WHERE id IN (SELECT id FROM items ORDER BY id LIMIT 2)`)
	e.exec(e.ctx, `DELETE FROM items WHERE id = (SELECT max(id) FROM items)`)
	e.waitCaughtUp(e.ctx)
	e.converge(e.ctx, time.Minute, e.want)
	if ids, states := e.groups(e.ctx); len(ids) != 1 || states[0] != "ACTIVE" {
		e.t.Fatalf("groups %v %v: a renamed, moved or re-created table must not replace the group", ids, states)
	}
	e.alive()
}

// away takes items away with the statement away, changes it there under
// the name at (updates, inserts, deletes), checks that the problem shows
// while it is away, with the remedy, and brings it back with back.
func (e *renameEnv) away(away, at, back string) {
	e.t.Helper()
	e.exec(e.ctx, away)
	e.exec(e.ctx, `UPDATE `+at+` SET a = a || ' while away' WHERE id <= 20`)
	e.exec(e.ctx, `INSERT INTO `+at+` SELECT i, 'added while away ' || i FROM generate_series(1001, 1010) i`)
	e.exec(e.ctx, `DELETE FROM `+at+` WHERE id BETWEEN 30 AND 35`)
	e.exec(e.ctx, `UPDATE notes SET a = a || ' meanwhile' WHERE id <= 5`)
	status := e.missingShown()
	if !strings.Contains(status, "RENAME TO") || !strings.Contains(status, "SET SCHEMA") {
		e.t.Errorf("the status of a missing table does not say how to fix it:\n%s", status)
	}
	e.exec(e.ctx, back)
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
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newRenameEnv(t, ctx)

	e.exec(ctx, `BEGIN`)
	e.exec(ctx, `ALTER TABLE items RENAME TO items_tx`)
	e.exec(ctx, `UPDATE items_tx SET a = a || ' in the transaction' WHERE id BETWEEN 100 AND 110`)
	e.exec(ctx, `INSERT INTO items_tx SELECT i, 'added in the transaction' FROM generate_series(2001, 2005) i`)
	e.exec(ctx, `ALTER TABLE items_tx RENAME TO items`)
	e.exec(ctx, `COMMIT`)
	e.converge(ctx, time.Minute, e.want)

	e.away(`ALTER TABLE items RENAME TO items_old`, "items_old", `ALTER TABLE items_old RENAME TO items`)
}

// TestTableMovedToAnotherSchemaAndBack is TestTableRenamedAndBack for
// ALTER TABLE … SET SCHEMA and back.
func TestTableMovedToAnotherSchemaAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newRenameEnv(t, ctx)
	e.exec(ctx, `CREATE SCHEMA other`)
	e.away(`ALTER TABLE items SET SCHEMA other`, "other.items", `ALTER TABLE other.items SET SCHEMA public`)
}

// TestTableDroppedAndRecreated drops a table the rules name under a
// running `syncpipe run` and creates it again with other rows: while it
// is missing the problem must show; then storage must hold the new
// table's rows and none of the old one's within 60 s, in the same group
// (syncpipe adds the new table to the publication it manages and re-reads
// it).
func TestTableDroppedAndRecreated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newRenameEnv(t, ctx)
	e.exec(ctx, `DROP TABLE items`)
	e.missingShown()
	// Rows of another key range: none of the old table's may stay.
	e.exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, a text NOT NULL)`)
	e.exec(ctx, `INSERT INTO items SELECT i, 'new item ' || i FROM generate_series(5001, 5100) i`)
	e.recovered()
}

// TestSinkPipelineFollowsRenamedTable renames a table a jsonl pipeline
// replicates away, updates a row of it under the new name and renames it
// back: the update must be in the sink (followed by the table's OID, not
// dropped for its name), as must a change made after the rename back.
func TestSinkPipelineFollowsRenamedTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 100, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "audit")
	appendConfig(t, e.config, fmt.Sprintf(`pipelines:
  - name: main
  - name: audit
    tables: [todos]
    sink: {type: jsonl, settings: {dir: %q}}
`, out))
	e.start()
	target := e.sourceLSN(ctx)
	e.waitFor(ctx, "the jsonl stream past "+target, func() bool { return jsonlStreamPast(ctx, e, out, target) })

	var away, after string
	if err := e.src.QueryRow(ctx, `SELECT min(id::text), max(id::text) FROM todos`).Scan(&away, &after); err != nil {
		t.Fatal(err)
	}
	e.exec(ctx, `ALTER TABLE todos RENAME TO todos_old`)
	e.exec(ctx, `UPDATE todos_old SET description = 'changed while renamed' WHERE id = $1`, away)
	e.exec(ctx, `ALTER TABLE todos_old RENAME TO todos`)
	e.exec(ctx, `UPDATE todos SET description = 'changed after the rename back' WHERE id = $1`, after)
	target = e.sourceLSN(ctx)
	e.waitFor(ctx, "the jsonl stream past "+target, func() bool { return jsonlStreamPast(ctx, e, out, target) })

	found := map[string]bool{}
	for _, l := range readJSONL(t, filepath.Join(out, "public.todos.jsonl")) {
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
	e.alive()
}
