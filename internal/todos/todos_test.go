package todos_test

import (
	"context"
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestLoadIsDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	size := todos.Size{Lists: 20, Todos: 500, Seed: 7}
	var fingerprints [2]string
	for i := range fingerprints {
		conn := pgtest.Connect(t, pgtest.NewDB(t))
		if _, err := todos.Load(ctx, conn, size); err != nil {
			t.Fatal(err)
		}
		var nLists, nTodos, orphans, short int
		err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM lists), (SELECT count(*) FROM todos),
			(SELECT count(*) FROM todos t WHERE NOT EXISTS (SELECT 1 FROM lists l WHERE l.id = t.list_id)),
			(SELECT count(*) FROM todos WHERE length(description) < 60)`).Scan(&nLists, &nTodos, &orphans, &short)
		if err != nil {
			t.Fatal(err)
		}
		if nLists != size.Lists || nTodos != size.Todos || orphans != 0 || short != 0 {
			t.Fatalf("lists=%d todos=%d orphans=%d short=%d", nLists, nTodos, orphans, short)
		}
		err = conn.QueryRow(ctx, `SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM todos t`).Scan(&fingerprints[i])
		if err != nil {
			t.Fatal(err)
		}
	}
	if fingerprints[0] != fingerprints[1] {
		t.Fatalf("same seed gave different data: %s vs %s", fingerprints[0], fingerprints[1])
	}
}

// TestLoadParallel: a parallel load has Load's shape — every todo in a
// list, descriptions of at least 60 characters, the same keys and index as
// Load's schema — and the same rows for the same size and parts.
func TestLoadParallel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	size := todos.Size{Lists: 20, Todos: 1001, Seed: 7}
	var fingerprints [2]string
	for i := range fingerprints {
		uri := pgtest.NewDB(t)
		lists, err := todos.LoadParallel(ctx, uri, size, 3)
		if err != nil {
			t.Fatal(err)
		}
		conn := pgtest.Connect(t, uri)
		var nLists, nTodos, distinct, orphans, short, keys int
		err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM lists), (SELECT count(*) FROM todos), (SELECT count(DISTINCT id) FROM todos),
			(SELECT count(*) FROM todos t WHERE NOT EXISTS (SELECT 1 FROM lists l WHERE l.id = t.list_id)),
			(SELECT count(*) FROM todos WHERE length(description) < 60),
			(SELECT count(*) FROM pg_indexes WHERE tablename = 'todos' AND indexname IN ('todos_pkey', 'todos_list_id'))
			  + (SELECT count(*) FROM pg_constraint WHERE conrelid = 'todos'::regclass AND contype = 'f')`).
			Scan(&nLists, &nTodos, &distinct, &orphans, &short, &keys)
		if err != nil {
			t.Fatal(err)
		}
		if len(lists) != size.Lists || nLists != size.Lists || nTodos != size.Todos || distinct != size.Todos || orphans != 0 || short != 0 || keys != 3 {
			t.Fatalf("lists=%d/%d todos=%d distinct=%d orphans=%d short=%d keys=%d", len(lists), nLists, nTodos, distinct, orphans, short, keys)
		}
		err = conn.QueryRow(ctx, `SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM todos t`).Scan(&fingerprints[i])
		if err != nil {
			t.Fatal(err)
		}
	}
	if fingerprints[0] != fingerprints[1] {
		t.Fatalf("same size and parts gave different data: %s vs %s", fingerprints[0], fingerprints[1])
	}
}
