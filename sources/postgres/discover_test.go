package postgres

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestDiscover(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	mustExec(t, conn,
		`CREATE SCHEMA app`,
		`CREATE TYPE app.mood AS ENUM ('sad', 'happy')`,
		`CREATE TABLE app.todos (
		   gone int, list_id uuid NOT NULL, id int8, tags text[], m app.mood, c char(4), boxes box[],
		   total int GENERATED ALWAYS AS (id * 2) STORED, PRIMARY KEY (list_id, id))`,
		`ALTER TABLE app.todos DROP COLUMN gone`,
		`INSERT INTO app.todos (list_id, id) SELECT gen_random_uuid(), g FROM generate_series(1, 500) g`,
		`ANALYZE app.todos`,
		// No primary key, replica identity index.
		`CREATE TABLE ri (a text NOT NULL, b int NOT NULL, v text)`,
		`CREATE UNIQUE INDEX ri_ab ON ri (b, a)`,
		`ALTER TABLE ri REPLICA IDENTITY USING INDEX ri_ab`,
		// Primary key and REPLICA IDENTITY FULL.
		`CREATE TABLE "Full" (id int PRIMARY KEY, v text)`,
		`ALTER TABLE "Full" REPLICA IDENTITY FULL`,
	)
	infos, err := Discover(testCtx(t), conn, []string{"app.todos", "ri", `public."Full"`})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 3 {
		t.Fatalf("%d tables", len(infos))
	}
	todos := infos[0]
	var names, types []string
	for _, c := range todos.Columns {
		names = append(names, c.Name)
		types = append(types, c.TypeName)
	}
	wantNames := []string{"list_id", "id", "tags", "m", "c", "boxes", "total"}
	wantTypes := []string{"uuid", "bigint", "text[]", "app.mood", "pg_catalog.bpchar", "box[]", "integer"}
	if !slices.Equal(names, wantNames) || !slices.Equal(types, wantTypes) {
		t.Errorf("columns %v %v", names, types)
	}
	if c := todos.Columns[2]; !c.IsArray || c.ElemOID != 25 || c.ElemDelim != ',' {
		t.Errorf("tags column = %+v", c)
	}
	if c := todos.Columns[5]; !c.IsArray || c.ElemDelim != ';' {
		t.Errorf("box[] column = %+v", c)
	}
	if !todos.Columns[6].Generated || !todos.Columns[0].NotNull || todos.Columns[0].Num != 2 {
		t.Errorf("flags: %+v", todos.Columns)
	}
	if todos.OID == 0 || todos.Schema != "app" || todos.ReplicaIdentity != IdentityDefault ||
		!slices.Equal(todos.KeyColumns, []int{0, 1}) || !slices.Equal(todos.IdentityColumns, []int{0, 1}) {
		t.Errorf("todos = %+v", todos)
	}
	if todos.EstimatedRows != 500 || todos.Pages < 1 {
		t.Errorf("estimate %d rows, %d pages", todos.EstimatedRows, todos.Pages)
	}
	ri := infos[1]
	if ri.ReplicaIdentity != IdentityIndex || !slices.Equal(ri.KeyColumns, []int{1, 0}) ||
		!slices.Equal(ri.IdentityColumns, []int{1, 0}) || ri.EstimatedRows != 0 {
		t.Errorf("ri = %+v", ri)
	}
	full := infos[2]
	if full.ReplicaIdentity != IdentityFull || !slices.Equal(full.KeyColumns, []int{0}) ||
		!slices.Equal(full.IdentityColumns, []int{0, 1}) || full.QualifiedName() != `public."Full"` {
		t.Errorf("full = %+v", full)
	}
}

func TestDiscoverProblems(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	mustExec(t, conn,
		`CREATE TABLE ok (id int PRIMARY KEY)`,
		`CREATE TABLE nokey (v text)`,
		`CREATE TABLE nothing (id int PRIMARY KEY)`,
		`ALTER TABLE nothing REPLICA IDENTITY NOTHING`,
		`CREATE VIEW v AS SELECT 1 AS x`,
	)
	infos, err := Discover(testCtx(t), conn, []string{"ok", "foo", "nokey", "nothing", "v", "a.b.c", "other.ok"})
	if len(infos) != 1 || infos[0].Name != "ok" {
		t.Errorf("usable tables = %+v", infos)
	}
	want := []string{
		"table public.foo from the sync rules does not exist in the source database (check the name and schema)",
		"table other.ok from the sync rules does not exist in the source database (check the name and schema)",
		"table public.nokey has no primary key or replica identity index: add one (ALTER TABLE public.nokey ADD PRIMARY KEY (…)) or set REPLICA IDENTITY USING INDEX",
		"table public.nothing has REPLICA IDENTITY NOTHING, so updates and deletes cannot be replicated: run ALTER TABLE public.nothing REPLICA IDENTITY DEFAULT",
		"public.v from the sync rules is a view, not a table: only tables can be replicated",
		`table name "a.b.c" is not of the form schema.name (quote parts that contain dots)`,
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("missing error line %q in:\n%v", w, err)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d error lines, want %d:\n%v", len(lines), len(want), err)
	}
	for _, sentinel := range []error{ErrTableNotFound, ErrNoKey, ErrBadTableName} {
		if !errors.Is(err, sentinel) {
			t.Errorf("error does not match %v", sentinel)
		}
	}
}
