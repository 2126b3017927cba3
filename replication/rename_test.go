package replication

import (
	"context"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRenamedWhileStopped renames a rules table away while no replicator
// runs, changes it under the new name and renames it back: the next run
// resumes from the stored position, the slot delivers those changes under
// the other name, and storage must equal the source (they are followed by
// the table's stored OID, not dropped for their name).
func TestRenamedWhileStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t, todos.Size{Lists: 5, Todos: 300, Seed: 11}, "")
	run := func() {
		rctx, stop := context.WithCancel(ctx)
		r := New(Options{Config: e.cfg, Store: e.store})
		errc := make(chan error, 1)
		go func() { errc <- r.Run(rctx) }()
		e.waitCheckpoint(t, ctx)
		stop()
		if err := <-errc; err != nil && rctx.Err() == nil {
			t.Fatalf("replicator: %v", err)
		}
	}
	run()
	for _, q := range []string{
		`ALTER TABLE todos RENAME TO todos_away`,
		`UPDATE todos_away SET description = 'while away', completed = NOT completed WHERE id IN (SELECT id FROM todos_away ORDER BY id LIMIT 20)`,
		`DELETE FROM todos_away WHERE id IN (SELECT id FROM todos_away ORDER BY id DESC LIMIT 5)`,
		`INSERT INTO todos_away (id, list_id, description) SELECT gen_random_uuid(), list_id, 'added while away' FROM todos_away LIMIT 3`,
		`ALTER TABLE todos_away RENAME TO todos`,
	} {
		if _, err := e.src.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run()
	sameBuckets(t, e.buckets(t), e.expected(t))
}

// TestRecreatedWhileStopped drops a rules table while no replicator runs
// and creates it again with other rows: the next run finds another
// relation under the name than the one storage's rows come from, adds it
// to the publication syncpipe manages (the drop took the old one out),
// removes the old rows and re-reads the new table, in the same group.
func TestRecreatedWhileStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t, todos.Size{Lists: 5, Todos: 300, Seed: 12}, "")
	run := func(until func() error) {
		rctx, stop := context.WithCancel(ctx)
		r := New(Options{Config: e.cfg, Store: e.store})
		errc := make(chan error, 1)
		go func() { errc <- r.Run(rctx) }()
		e.waitCheckpoint(t, ctx)
		if until != nil {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for err := until(); err != nil; err = until() {
				select {
				case <-ctx.Done():
					t.Fatalf("storage does not equal the source: %v", err)
				case <-tick.C:
				}
			}
		}
		stop()
		if err := <-errc; err != nil && rctx.Err() == nil {
			t.Fatalf("replicator: %v", err)
		}
	}
	run(nil)
	for _, q := range []string{
		`DROP TABLE todos`,
		`CREATE TABLE todos (id uuid PRIMARY KEY, list_id uuid NOT NULL REFERENCES lists (id) ON DELETE CASCADE,
			description text NOT NULL, completed boolean NOT NULL DEFAULT false, created_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO todos (id, list_id, description) SELECT gen_random_uuid(), id, 'in the new table' FROM lists`,
	} {
		if _, err := e.src.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run(func() error { return bucketcheck.Diff(e.buckets(t), e.expected(t)) })
	gs, err := e.store.Catalog().Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 {
		t.Fatalf("%d groups: a re-created table must not replace the group", len(gs))
	}
}
