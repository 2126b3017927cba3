package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
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
	r := NewStreamReader(nil, StreamReaderConfig[StreamPosition]{Tables: []*ReadTable{items, notes}, Reshape: noReshape{t}})
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
	r.follow(items, 200)
	if notes.OID != 0 || r.byOID[200] != items || r.byOID[100] != nil {
		t.Fatalf("after items took notes' relation: notes follows %d, 200 → %p, 100 → %p", notes.OID, r.byOID[200], r.byOID[100])
	}
}

// noReshape fails a test that re-shapes a table.
type noReshape struct{ t *testing.T }

func (n noReshape) Reshape(_ context.Context, rt *ReadTable, _ Shape, oid uint32) (Reshape[StreamPosition], error) {
	n.t.Fatalf("table %s re-shaped to relation %d", rt.Name, oid)
	return Reshape[StreamPosition]{}, nil
}

// testReader reads one table, public.items (relation 100), resuming
// from from; its batches' progress is their StreamPosition.
func testReader(t *testing.T, from StreamPosition) (*StreamReader[StreamPosition], *logrepl.Relation) {
	sh := Shape{Identity: "d", Columns: []ShapeColumn{{Name: "id", Type: 23, Key: true}}}
	items := &ReadTable{Name: "public.items", OID: 100, Shape: sh, Table: &StreamTable{}}
	rel := &logrepl.Relation{ID: 100, Namespace: "public", Name: "items", ReplicaIdentity: 'd',
		Columns: []logrepl.Column{{Name: "id", TypeOID: 23, Key: true}}}
	r := NewStreamReader(nil, StreamReaderConfig[StreamPosition]{From: from, Tables: []*ReadTable{items},
		Reshape: noReshape{t}, Position: func(p *StreamPosition, at StreamPosition) { *p = at }})
	return r, rel
}

// txn is a source transaction committed at lsn of n changes of rel:
// INSERTs, a TRUNCATE at index truncate (-1: none).
func txn(rel *logrepl.Relation, lsn logrepl.LSN, n, truncate int) logrepl.Txn {
	tx := logrepl.Txn{CommitLSN: lsn, EndLSN: lsn + 1}
	for i := range n {
		c := logrepl.Change{Kind: logrepl.Insert, Relation: rel}
		if i == truncate {
			c = logrepl.Change{Kind: logrepl.Truncate, TruncateRelations: []*logrepl.Relation{rel}}
		}
		tx.Changes = append(tx.Changes, c)
	}
	return tx
}

// drain returns the queued batches as (items' indexes in their
// transaction, position) pairs.
func drain(r *StreamReader[StreamPosition]) (idx [][]int64, pos []StreamPosition) {
	for _, b := range r.queue {
		var ix []int64
		for _, it := range b.Items {
			ix = append(ix, it.Row.TxnIndex)
		}
		idx, pos = append(idx, ix), append(pos, b.Progress)
	}
	r.queue = nil
	return idx, pos
}

// TestReaderResumesInsideTransaction: resumed inside a transaction the
// sink holds 2 changes of, the reader skips those when the slot delivers
// the transaction again, and goes on at change 2; a slot that delivers
// another transaction first cannot complete it.
func TestReaderResumesInsideTransaction(t *testing.T) {
	from := StreamPosition{LSN: 10, TxnLSN: 50, TxnChanges: 2}
	r, rel := testReader(t, from)
	// Until the rest of the transaction arrives, no batch is due: a
	// position-only batch now would record the stream outside the
	// transaction, and a sink would then publish (bucket storage) or
	// resume from (any sink) the part it holds as if it were whole.
	if w := r.idleWait(time.Now()); w >= 0 {
		t.Fatalf("resumed inside a transaction, a position is due in %v; want none", w)
	}
	tx := txn(rel, 50, 4, -1)
	if err := r.convert(context.Background(), logrepl.Batch{Txns: []logrepl.Txn{tx}, EndLSN: tx.EndLSN}); err != nil {
		t.Fatal(err)
	}
	idx, pos := drain(r)
	if len(idx) != 1 || !slices.Equal(idx[0], []int64{2, 3}) || pos[0] != (StreamPosition{LSN: 51}) {
		t.Fatalf("batches %v at %v, want [[2 3]] at {51 0 0}", idx, pos)
	}
	r, rel = testReader(t, from)
	tx = txn(rel, 40, 1, -1)
	err := r.convert(context.Background(), logrepl.Batch{Txns: []logrepl.Txn{tx}, EndLSN: tx.EndLSN})
	if !errors.Is(err, ErrTxnNotRedelivered) {
		t.Fatalf("another transaction first: %v, want ErrTxnNotRedelivered", err)
	}
}

// TestReaderTruncateAlone: a TRUNCATE gets a batch of its own, between
// the changes before and after it, each batch ending at its position
// inside the transaction; the last one at the transaction's end.
func TestReaderTruncateAlone(t *testing.T) {
	r, rel := testReader(t, StreamPosition{LSN: 10})
	tx := txn(rel, 50, 4, 2)
	if err := r.convert(context.Background(), logrepl.Batch{Txns: []logrepl.Txn{tx}, EndLSN: tx.EndLSN}); err != nil {
		t.Fatal(err)
	}
	idx, pos := drain(r)
	wantIdx := [][]int64{{0, 1}, {2}, {3}}
	wantPos := []StreamPosition{{LSN: 10, TxnLSN: 50, TxnChanges: 2}, {LSN: 10, TxnLSN: 50, TxnChanges: 3}, {LSN: 51}}
	if len(idx) != 3 || !slices.Equal(pos, wantPos) {
		t.Fatalf("batches %v at %v, want %v at %v", idx, pos, wantIdx, wantPos)
	}
	for i := range idx {
		if !slices.Equal(idx[i], wantIdx[i]) {
			t.Fatalf("batches %v, want %v", idx, wantIdx)
		}
	}
}

// TestRowStatesNewestUntilCommitted: a row's newest decoded state is the
// one of its latest batch (nil after a delete) until that batch is
// committed; then the sink holds it and the decoder forgets it.
func TestRowStatesNewestUntilCommitted(t *testing.T) {
	spec := &stages.TableSpec{Table: &model.Table{ID: "public.items"}, Toast: []int{1}}
	var rs rowStates
	ref := RowRef{Table: "public.items", Key: [16]byte{1}, KeyOrder: 7}
	rs.remember(spec, ref, []byte("a"), 0)
	rs.remember(spec, ref, []byte("b"), 1)
	if d, ok := rs.pendingRow(ref); !ok || string(d) != "b" {
		t.Fatalf("pending %q %v, want b", d, ok)
	}
	rs.remember(spec, ref, nil, 1)
	if d, ok := rs.pendingRow(ref); !ok || d != nil {
		t.Fatalf("after a delete: pending %q %v, want nil", d, ok)
	}
	rs.committed(0)
	if _, ok := rs.pendingRow(ref); !ok {
		t.Fatal("batch 1 not committed yet, its state is forgotten")
	}
	rs.committed(1)
	if _, ok := rs.pendingRow(ref); ok {
		t.Fatal("batch 1 committed, its state is still pending")
	}
}
