package replication

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// schemaChanges are the DDLs TestSchemaChanges applies, each to a table no
// row of which changed since the replicator started (u_…: only the catalog
// check can see it) and to one just written (w_…: the stream sees the new
// shape in the relation before the next change).
var schemaChanges = []struct{ name, ddl string }{
	{"add", `ALTER TABLE %s ADD COLUMN c text NOT NULL DEFAULT 'filled'`},
	{"drop", `ALTER TABLE %s DROP COLUMN b`},
	{"type", `ALTER TABLE %s ALTER COLUMN b TYPE text USING 'n' || b`},
	{"ident", `ALTER TABLE %s REPLICA IDENTITY FULL`},
}

// TestSchemaChanges changes tables under a running replicator: ADD
// COLUMN, DROP COLUMN, a column type change and REPLICA IDENTITY FULL,
// each on a table untouched since start-up and on one just written.
// Storage must equal the source afterwards (each table re-read in its new
// shape while the stream goes on), later changes must apply in the new
// shape, the group must not be replaced, and the replicator must never
// stop. (Moved from the binary tests, cli/schemachange_test.go: nothing of
// it needs a process.)
func TestSchemaChanges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var tables, queries []string
	for _, c := range schemaChanges {
		for _, v := range []string{"u_", "w_"} {
			tables = append(tables, v+c.name)
			queries = append(queries, "- SELECT * FROM "+v+c.name)
		}
	}
	e := &env{source: pgtest.NewDB(t), storage: pgtest.NewDB(t)}
	e.src = pgtest.Connect(t, e.source)
	exec := func(q string) {
		t.Helper()
		if _, err := e.src.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tb := range tables {
		exec(fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, a text NOT NULL, b int NOT NULL)`, tb))
		exec(fmt.Sprintf(`INSERT INTO %s SELECT i, 'row ' || i, i * 10 FROM generate_series(1, 300) i`, tb))
	}
	// The catalog check every second, as the binary tests run it.
	var err error
	e.cfg, err = config.LoadBytes("test.yaml", fmt.Appendf(nil, `
source: {uri: %q, publication: syncpipe}
storage: {uri: %q}
sync_rules:
  content: |
    bucket_definitions:
      global:
        data:
%s
replication:
  stream: {batch_max_wait: 20ms, schema_check_interval: 1s}
`, e.source, e.storage, indent(strings.Join(queries, "\n"), "          ")))
	if err != nil {
		t.Fatal(err)
	}
	if e.store, err = bucketstore.Open(ctx, bucketstore.Config{URI: e.storage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.store.Close)
	want := func() bucketcheck.State {
		st := bucketcheck.State{"1#global[]": {}}
		for _, tb := range tables {
			rows, err := e.src.Query(ctx, fmt.Sprintf(`SELECT id::text, row_to_json(x)::text FROM %s x`, tb))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id, data string
				if err := rows.Scan(&id, &data); err != nil {
					t.Fatal(err)
				}
				st["1#global[]"][tb+"/"+id] = data
			}
			rows.Close()
		}
		return st
	}
	// converge waits until storage equals the source (a u_ table's re-read
	// follows the catalog check, not a checkpoint), failing with the last
	// difference after timeout or when the replicator stopped.
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}) // closed when Run returned runErr
	var runErr error
	converge := func(timeout time.Duration) {
		t.Helper()
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			got, err := bucketcheck.Stored(ctx, e.store.Pool(), "syncpipe")
			if err == nil {
				err = bucketcheck.Diff(got, want())
			}
			if err == nil {
				return
			}
			select {
			case <-deadline.C:
				t.Fatalf("storage does not equal the source after %s: %v", timeout, err)
			case <-done:
				t.Fatalf("the replicator stopped: %v (storage: %v)", runErr, err)
			case <-tick.C:
			}
		}
	}
	r := New(Options{Config: e.cfg, Store: e.store})
	go func() {
		defer close(done)
		runErr = r.Run(rctx)
	}()
	defer func() {
		stop()
		<-done
		if runErr != nil && rctx.Err() == nil {
			t.Errorf("replicator: %v", runErr)
		}
	}()
	e.waitCheckpoint(t, ctx)
	converge(time.Minute)

	// The w_ tables are written, so the stream has bound their relations.
	for _, c := range schemaChanges {
		exec(fmt.Sprintf(`UPDATE w_%s SET a = a || ' written' WHERE id <= 20`, c.name))
	}
	e.waitCheckpoint(t, ctx)
	for _, c := range schemaChanges {
		exec(fmt.Sprintf(c.ddl, "u_"+c.name))
		exec(fmt.Sprintf(c.ddl, "w_"+c.name))
		exec(fmt.Sprintf(`UPDATE w_%s SET a = 'after the change' WHERE id <= 5`, c.name))
	}
	converge(2 * time.Minute)

	// Later changes of every table apply in its new shape.
	for _, tb := range tables {
		exec(fmt.Sprintf(`UPDATE %s SET a = 'later' WHERE id IN (7, 8)`, tb))
		exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 9`, tb))
	}
	e.waitCheckpoint(t, ctx)
	converge(time.Minute)
	var groups []string
	rows, err := e.store.Pool().Query(ctx, `SELECT id || ' ' || state FROM groups ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	rows.Close()
	if len(groups) != 1 || groups[0] != "1 ACTIVE" {
		t.Fatalf("groups %v: a schema change must not replace the group", groups)
	}
}
