package todos_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLoadIsDeterministic: both loaders give the data set's shape — every
// todo in a list, descriptions of at least 60 characters, the keys and
// index of Schema — and the same rows for the same size (and parts).
func TestLoadIsDeterministic(t *testing.T) {
	t.Parallel()
	size := todos.Size{Lists: 20, Todos: 1001, Seed: 7}
	loaders := map[string]func(ctx context.Context, uri string) error{
		"Load": func(ctx context.Context, uri string) error {
			conn, err := pgx.Connect(ctx, uri)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			_, err = todos.Load(ctx, conn, size)
			return err
		},
		"LoadParallel": func(ctx context.Context, uri string) error {
			_, err := todos.LoadParallel(ctx, uri, size, 3)
			return err
		},
	}
	for name, load := range loaders {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var fingerprints [2]string
			for i := range fingerprints {
				uri := pgtest.NewDB(t)
				if err := load(ctx, uri); err != nil {
					t.Fatal(err)
				}
				conn := pgtest.Connect(t, uri)
				var nLists, nTodos, orphans, short, keys int
				err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM lists), (SELECT count(*) FROM todos),
					(SELECT count(*) FROM todos t WHERE NOT EXISTS (SELECT 1 FROM lists l WHERE l.id = t.list_id)),
					(SELECT count(*) FROM todos WHERE length(description) < 60),
					(SELECT count(*) FROM pg_indexes WHERE tablename = 'todos' AND indexname IN ('todos_pkey', 'todos_list_id'))
					  + (SELECT count(*) FROM pg_constraint WHERE conrelid = 'todos'::regclass AND contype = 'f')`).
					Scan(&nLists, &nTodos, &orphans, &short, &keys)
				if err != nil {
					t.Fatal(err)
				}
				if nLists != size.Lists || nTodos != size.Todos || orphans != 0 || short != 0 || keys != 3 {
					t.Fatalf("lists=%d todos=%d orphans=%d short=%d keys=%d", nLists, nTodos, orphans, short, keys)
				}
				err = conn.QueryRow(ctx, `SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM todos t`).Scan(&fingerprints[i])
				if err != nil {
					t.Fatal(err)
				}
			}
			if fingerprints[0] != fingerprints[1] {
				t.Fatalf("same size gave different data: %s vs %s", fingerprints[0], fingerprints[1])
			}
		})
	}
}
