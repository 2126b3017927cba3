package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
)

// TestTablesRenamedMovedRecreated renames, moves and re-creates a table
// the rules name under a running `syncpipe run`, writing to it meanwhile:
// once it is back under its name, storage must equal the source within
// 60 s — the changes made under the other name included, the rows of a
// dropped table gone — in the same group. While the table is missing,
// `syncpipe status`, /healthz and the failing-units metric must show it,
// with the remedy; /healthz is ok again once it is back.
func TestTablesRenamedMovedRecreated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: "bucket_definitions:\n  global:\n    data:\n      - SELECT * FROM items\n      - SELECT * FROM notes\n"})
	e.exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, a text NOT NULL)`)
	e.exec(ctx, `CREATE TABLE notes (id int PRIMARY KEY, a text NOT NULL)`)
	e.exec(ctx, `INSERT INTO items SELECT i, 'item ' || i FROM generate_series(1, 200) i`)
	e.exec(ctx, `INSERT INTO notes SELECT i, 'note ' || i FROM generate_series(1, 50) i`)
	e.exec(ctx, `CREATE SCHEMA other`)
	want := func() bucketcheck.State {
		st := bucketcheck.State{"1#global[]": {}}
		for _, tb := range []string{"items", "notes"} {
			rows, err := e.src.Query(ctx, `SELECT id::text, row_to_json(x)::text FROM `+tb+` x`)
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
	e.start()
	e.waitCaughtUp(ctx)
	e.converge(ctx, time.Minute, want)

	// away takes items away with the statements of away, writes to it
	// there, checks that the problem shows while it is, and brings it
	// back with the statements of back.
	away := func(away []string, write string, added int, back []string) {
		for _, q := range away {
			e.exec(ctx, q)
		}
		e.exec(ctx, strings.ReplaceAll(`UPDATE %s SET a = a || ' while away' WHERE id <= 20`, "%s", write))
		e.exec(ctx, strings.ReplaceAll(`INSERT INTO %s SELECT i, 'added while away ' || i FROM generate_series($1::int, $1 + 9) i`, "%s", write), added)
		e.exec(ctx, strings.ReplaceAll(`DELETE FROM %s WHERE id BETWEEN $1::int / 100 AND $1::int / 100 + 5`, "%s", write), added)
		e.exec(ctx, `UPDATE notes SET a = a || ' meanwhile' WHERE id <= 5`)
		var status string
		e.waitFor(ctx, "syncpipe status to show the missing table", func() bool {
			_, status, _ = runCLI(t, "status", "--config", e.config)
			return strings.Contains(status, "public.items") && strings.Contains(status, "does not exist")
		})
		e.waitFor(ctx, "/healthz to say degraded, naming the table", func() bool {
			h := e.get(ctx, "/healthz")
			return strings.Contains(h, "degraded") && strings.Contains(h, "public.items")
		})
		e.waitFor(ctx, "a failing unit in /metrics", func() bool {
			return strings.Contains(e.get(ctx, "/metrics"), `syncpipe_replication_failing_units{`)
		})
		for _, q := range back {
			e.exec(ctx, q)
		}
		e.converge(ctx, time.Minute, want)
		e.waitFor(ctx, "/healthz to be ok again", func() bool { return strings.Contains(e.get(ctx, "/healthz"), `"status":"ok"`) })
		if !strings.Contains(status, "RENAME TO") || !strings.Contains(status, "SET SCHEMA") {
			t.Errorf("the status of a missing table does not say how to fix it:\n%s", status)
		}
		// Later changes apply as before.
		e.exec(ctx, `UPDATE items SET a = 'later' WHERE id IN (1, $1)`, added)
		e.exec(ctx, `DELETE FROM items WHERE id = 2`)
		e.waitCaughtUp(ctx)
		e.converge(ctx, time.Minute, want)
	}

	// Too quick for the catalog check: only the stream sees it.
	e.exec(ctx, `BEGIN`)
	e.exec(ctx, `ALTER TABLE items RENAME TO items_tx`)
	e.exec(ctx, `UPDATE items_tx SET a = a || ' in the transaction' WHERE id BETWEEN 100 AND 110`)
	e.exec(ctx, `INSERT INTO items_tx SELECT i, 'added in the transaction' FROM generate_series(2001, 2005) i`)
	e.exec(ctx, `ALTER TABLE items_tx RENAME TO items`)
	e.exec(ctx, `COMMIT`)
	e.converge(ctx, time.Minute, want)

	away([]string{`ALTER TABLE items RENAME TO items_old`}, "items_old", 1001, []string{`ALTER TABLE items_old RENAME TO items`})
	away([]string{`ALTER TABLE items SET SCHEMA other`}, "other.items", 3001, []string{`ALTER TABLE other.items SET SCHEMA public`})

	e.exec(ctx, `DROP TABLE items`)
	e.waitFor(ctx, "syncpipe status to show the missing table", func() bool {
		_, status, _ := runCLI(t, "status", "--config", e.config)
		return strings.Contains(status, "public.items") && strings.Contains(status, "does not exist")
	})
	// Rows of another key range: none of the old table's may stay.
	e.exec(ctx, `CREATE TABLE items (id int PRIMARY KEY, a text NOT NULL)`)
	e.exec(ctx, `INSERT INTO items SELECT i, 'new item ' || i FROM generate_series(5001, 5100) i`)
	e.converge(ctx, time.Minute, want)
	e.waitFor(ctx, "/healthz to be ok again", func() bool { return strings.Contains(e.get(ctx, "/healthz"), `"status":"ok"`) })
	e.exec(ctx, `UPDATE items SET a = 'later' WHERE id IN (5001, 5002)`)
	e.exec(ctx, `DELETE FROM items WHERE id = 5003`)
	e.waitCaughtUp(ctx)
	e.converge(ctx, time.Minute, want)

	if ids, states := e.groups(ctx); len(ids) != 1 || states[0] != "ACTIVE" {
		t.Fatalf("groups %v %v: a renamed or re-created table must not replace the group", ids, states)
	}
	e.alive()
}
