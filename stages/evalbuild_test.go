package stages

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// The Eval and Build stages give exactly the Changes the one-step Builder
// gives: same keys, puts, checksums, lookups and row data, for data rows,
// parameter rows, big (TOASTable) rows, deletes and key changes.
func TestEvalBuildMatchesBuilder(t *testing.T) {
	lists, todoSpec := todoSpecs(t)
	todoSpec.Toast = []int{2}
	todo := func(id, list, desc string) []model.Value {
		return []model.Value{model.Text(id), model.Text(list), model.Text(desc), model.Bool(false), model.Text("2026-01-01 09:00:00Z")}
	}
	list := func(id, name string) []model.Value {
		return []model.Value{model.Text(id), model.Text(name), model.Text("u1")}
	}
	in := []RowChange{
		{Spec: todoSpec, Kind: model.Upsert, Row: todo("t1", "l1", "milk"), TxnLSN: 9, TxnIndex: 0},
		{Spec: lists, Kind: model.Upsert, Row: list("l1", "groceries"), TxnLSN: 9, TxnIndex: 1},
		{Spec: todoSpec, Kind: model.Upsert, Row: todo("t2", "l2", strings.Repeat("long ", 200))},
		{Spec: todoSpec, Kind: model.Delete, Row: []model.Value{model.Text("t3"), {}, {}, {}, {}}},
		{Spec: todoSpec, Kind: model.Upsert, Row: todo("t5", "l1", "moved"), Old: []model.Value{model.Text("t4"), {}, {}, {}, {}}},
		{Spec: todoSpec, Kind: model.Upsert, Row: todo("t6", "l1", "same key"), Old: []model.Value{model.Text("t6"), {}, {}, {}, {}}},
		{Spec: lists, Kind: model.Truncate},
	}
	var want []model.Change
	for _, rc := range in {
		b := NewBuilder(rc.Spec)
		switch rc.Kind {
		case model.Truncate:
			want = append(want, model.Change{Table: rc.Spec.Table, Kind: model.Truncate})
			continue
		case model.Delete:
			want = b.Delete(rc.Row, want)
		case model.Upsert:
			if rc.Old != nil && b.ReplicaID(rc.Old) != b.ReplicaID(rc.Row) {
				want = b.Delete(rc.Old, want)
			}
			var err error
			if want, err = b.Upsert(rc.Row, want); err != nil {
				t.Fatal(err)
			}
		}
		for i := len(want) - 1; i >= 0 && want[i].Kind != model.Truncate && want[i].TxnLSN == 0; i-- {
			want[i].TxnLSN, want[i].TxnIndex = rc.TxnLSN, rc.TxnIndex
			if i == 0 || rc.Kind != model.Upsert || rc.Old == nil {
				break
			}
		}
	}

	p := pipeline.New[int](pipeline.Config{Name: "t"})
	sent := false
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[RowChange, int](func(context.Context) (pipeline.Batch[RowChange, int], error) {
		if sent {
			return pipeline.Batch[RowChange, int]{}, pipeline.ErrEndOfInput
		}
		sent = true
		return pipeline.Batch[RowChange, int]{Items: in, Rows: len(in)}, nil
	}))
	var got []model.Change
	var rowErrs int
	built := Build(Eval(src, pipeline.StageConfig{Workers: 2}, func(*model.Table, error) { rowErrs++ }), pipeline.StageConfig{Workers: 2})
	pipeline.Commit(built, pipeline.StageConfig{Name: "commit"}, func(_ context.Context, b pipeline.Batch[model.Change, int]) error {
		got = append(got, b.Items...)
		return nil
	})
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rowErrs != 0 {
		t.Errorf("%d row errors", rowErrs)
	}
	if len(got) != len(want) {
		t.Fatalf("%d changes; want %d:\ngot  %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(normal(got[i]), normal(want[i])) {
			t.Errorf("change %d:\ngot  %+v\nwant %+v", i, got[i], want[i])
		}
	}
	if got[2].RowData == nil {
		t.Error("a big row carries no RowData")
	}
}

// normal drops the difference between nil and empty slices.
func normal(c model.Change) model.Change {
	if len(c.Puts) == 0 {
		c.Puts = nil
	}
	if len(c.Lookups) == 0 {
		c.Lookups = nil
	}
	return c
}

// TestBuildTakesAKnownKey: a row change whose decoder already derived its
// replica id and row data (Derived) is built with them, not hashed and
// encoded again; one without is hashed.
func TestBuildTakesAKnownKey(t *testing.T) {
	_, todoSpec := todoSpecs(t)
	row := []model.Value{model.Text("t1"), model.Text("l1"), model.Text("milk"), model.Bool(false), model.Text("2026-01-01 09:00:00Z")}
	var rk checksum.ReplicaKey
	hashed := ReplicaID(&rk, todoSpec, row)
	known := [16]byte{1, 2, 3} // not the row's hash: shows which one build used
	data := []byte("derived")  // not the row's encoding (a small row has none)
	in := []Evaluated{
		{RowChange: &RowChange{Spec: todoSpec, Kind: model.Upsert, Row: row, Key: known, RowData: data, Derived: true}},
		{RowChange: &RowChange{Spec: todoSpec, Kind: model.Delete, Row: row, Key: known, Derived: true}},
		{RowChange: &RowChange{Spec: todoSpec, Kind: model.Upsert, Row: row}},
	}
	got := build(&rk, in, 0)
	if len(got) != 3 || got[0].Key != known || got[1].Key != known || got[2].Key != hashed {
		t.Fatalf("keys %x, want %x, %x, %x", []any{got[0].Key, got[1].Key, got[2].Key}, known, known, hashed)
	}
	if string(got[0].RowData) != "derived" || got[2].RowData != nil {
		t.Fatalf("row data %q and %q, want the derived one and none", got[0].RowData, got[2].RowData)
	}
}
