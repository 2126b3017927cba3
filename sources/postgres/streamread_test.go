package postgres

import (
	"context"
	"testing"

	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// TestBindFollowsTheRelation: a relation is a pipeline's table by its
// name or, under any other name (renamed, moved to another schema), by the
// OID of the relation the sink's rows come from; another relation under
// another name is none of the pipeline's. A table that takes over an OID
// another table followed leaves that one without (it is re-shaped once
// its name shows a relation).
func TestBindFollowsTheRelation(t *testing.T) {
	sh := Shape{Identity: "d", Columns: []ShapeColumn{{Name: "id", Type: 23, Key: true}, {Name: "a", Type: 25}}}
	items := &ReadTable{Name: "public.items", OID: 100, Shape: sh}
	notes := &ReadTable{Name: "public.notes", OID: 200, Shape: sh}
	r := NewStreamReader(nil, StreamReaderConfig[struct{}]{Tables: []*ReadTable{items, notes}, Reshape: noReshape{t}})
	rel := func(oid uint32, nsp, name string) *logrepl.Relation {
		return &logrepl.Relation{ID: oid, Namespace: nsp, Name: name, ReplicaIdentity: 'd',
			Columns: []logrepl.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "a", TypeOID: 25}}}
	}
	for _, rl := range []*logrepl.Relation{rel(100, "public", "items_old"), rel(100, "other", "items"), rel(100, "public", "items")} {
		got, err := r.bind(context.Background(), rl, nil)
		if err != nil || got != items {
			t.Fatalf("relation %d %s.%s: bound to %p (%v), want items %p", rl.ID, rl.Namespace, rl.Name, got, err, items)
		}
	}
	if got, err := r.bind(context.Background(), rel(300, "public", "items_old"), nil); got != nil || err != nil {
		t.Fatalf("another relation under another name bound to %p (%v), want none", got, err)
	}
	r.Follow(items, 200)
	if notes.OID != 0 || r.byOID[200] != items || r.byOID[100] != nil {
		t.Fatalf("after items took notes' relation: notes follows %d, 200 → %p, 100 → %p", notes.OID, r.byOID[200], r.byOID[100])
	}
}

// noReshape fails a test that re-shapes a table.
type noReshape struct{ t *testing.T }

func (n noReshape) Reshape(_ context.Context, rt *ReadTable, _ Shape, oid uint32) (Reshape[struct{}], error) {
	n.t.Fatalf("table %s re-shaped to relation %d", rt.Name, oid)
	return Reshape[struct{}]{}, nil
}
