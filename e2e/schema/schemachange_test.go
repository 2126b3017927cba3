package schema

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/e2e/internal/harness"
	"github.com/syncpipe/syncpipe/internal/bucketcheck"
)

// schemaChanges are the DDLs TestSchemaChanges applies, each to a table no
// row of which changed since syncpipe started (u_…: only the catalog check
// can see it) and to one just written (w_…: the stream sees the new shape
// in the relation before the next change).
var schemaChanges = []struct{ name, ddl string }{
	{"add", `ALTER TABLE %s ADD COLUMN c text NOT NULL DEFAULT 'filled'`},
	{"drop", `ALTER TABLE %s DROP COLUMN b`},
	{"type", `ALTER TABLE %s ALTER COLUMN b TYPE text USING 'n' || b`},
	{"ident", `ALTER TABLE %s REPLICA IDENTITY FULL`},
}

// TestSchemaChanges changes tables under a running `syncpipe run`: ADD
// COLUMN, DROP COLUMN, a column type change and REPLICA IDENTITY FULL,
// each on a table untouched since start-up and on one just written.
// Storage must equal the source afterwards (each table re-read in its new
// shape while the stream goes on), later changes must apply in the new
// shape, and the process must never exit.
func TestSchemaChanges(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var tables, queries []string
	for _, c := range schemaChanges {
		for _, v := range []string{"u_", "w_"} {
			tables = append(tables, v+c.name)
			queries = append(queries, "      - SELECT * FROM "+v+c.name)
		}
	}
	e := harness.New(t, harness.Options{Rules: "bucket_definitions:\n  global:\n    data:\n" + strings.Join(queries, "\n") + "\n"})
	for _, tb := range tables {
		e.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, a text NOT NULL, b int NOT NULL)`, tb))
		e.Exec(ctx, fmt.Sprintf(`INSERT INTO %s SELECT i, 'row ' || i, i * 10 FROM generate_series(1, 300) i`, tb))
	}
	want := func() bucketcheck.State { return globalRows(ctx, e, tables...) }
	e.Start()
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, time.Minute, want)

	// The w_ tables are written, so the stream has bound their relations.
	for _, c := range schemaChanges {
		e.Exec(ctx, fmt.Sprintf(`UPDATE w_%s SET a = a || ' written' WHERE id <= 20`, c.name))
	}
	e.WaitCaughtUp(ctx)
	for _, c := range schemaChanges {
		e.Exec(ctx, fmt.Sprintf(c.ddl, "u_"+c.name))
		e.Exec(ctx, fmt.Sprintf(c.ddl, "w_"+c.name))
		e.Exec(ctx, fmt.Sprintf(`UPDATE w_%s SET a = 'after the change' WHERE id <= 5`, c.name))
	}
	e.Converge(ctx, 2*time.Minute, want)
	e.Alive()

	// Later changes of every table apply in its new shape.
	for _, tb := range tables {
		e.Exec(ctx, fmt.Sprintf(`UPDATE %s SET a = 'later' WHERE id IN (7, 8)`, tb))
		e.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE id = 9`, tb))
	}
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, time.Minute, want)
	if ids, states := e.Groups(ctx); len(ids) != 1 || states[0] != "ACTIVE" {
		t.Fatalf("groups %v %v: a schema change must not replace the group", ids, states)
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
