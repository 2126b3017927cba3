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
