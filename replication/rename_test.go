package replication

import (
	"context"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// TestBindFollowsTheStoredRelation: a relation is a rules table by its
// name or, under any other name (renamed, moved to another schema), by the
// OID of the relation its stored rows come from; another relation under
// another name is none of the rules'. A table that takes over an OID
// another table followed leaves that one without (it is re-read once its
// name shows a relation).
func TestBindFollowsTheStoredRelation(t *testing.T) {
	sh := shape{Identity: "d", Columns: []shapeColumn{{Name: "id", Type: 23, Key: true}, {Name: "a", Type: 25}}}
	items, notes := &tableState{shape: sh}, &tableState{shape: sh}
	s := &streamer{byName: map[string]*tableState{"public.items": items, "public.notes": notes}, byOID: map[uint32]*tableState{}}
	s.follow(items, 100)
	s.follow(notes, 200)
	rel := func(oid uint32, nsp, name string) *logrepl.Relation {
		return &logrepl.Relation{ID: oid, Namespace: nsp, Name: name, ReplicaIdentity: 'd',
			Columns: []logrepl.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "a", TypeOID: 25}}}
	}
	for _, r := range []*logrepl.Relation{rel(100, "public", "items_old"), rel(100, "other", "items"), rel(100, "public", "items")} {
		ts, err := s.bind(context.Background(), r, nil)
		if err != nil || ts != items {
			t.Fatalf("relation %d %s.%s: bound to %p (%v), want items %p", r.ID, r.Namespace, r.Name, ts, err, items)
		}
	}
	if ts, err := s.bind(context.Background(), rel(300, "public", "items_old"), nil); ts != nil || err != nil {
		t.Fatalf("another relation under another name bound to %p (%v), want none", ts, err)
	}
	s.follow(items, 200)
	if notes.oid != 0 || s.byOID[200] != items || s.byOID[100] != nil {
		t.Fatalf("after items took notes' relation: notes follows %d, 200 → %p, 100 → %p", notes.oid, s.byOID[200], s.byOID[100])
	}
}

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
	gs, err := e.store.Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 {
		t.Fatalf("%d groups: a re-created table must not replace the group", len(gs))
	}
}
