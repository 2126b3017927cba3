package stages

import (
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

func toastSpec(t testing.TB) *TableSpec {
	t.Helper()
	_, spec := todoSpecs(t)
	s := *spec
	s.Toast = []int{2, 4} // description, created_at (as if text columns)
	return &s
}

func TestRowDataOnlyForBigRows(t *testing.T) {
	spec := toastSpec(t)
	b := NewBuilder(spec)
	small := []model.Value{model.Text("t1"), model.Text("l1"), model.Text("milk"),
		model.Bool(true), model.Null()}
	big := []model.Value{model.Text("t2"), model.Text("l1"), model.Text(strings.Repeat("milk ", 100)),
		model.Int(7), model.Null()}
	cs, err := b.Upsert(small, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cs, err = b.Upsert(big, cs); err != nil {
		t.Fatal(err)
	}
	if cs[0].RowData != nil {
		t.Fatalf("small row carries %d bytes of row data", len(cs[0].RowData))
	}
	if cs[1].RowData == nil {
		t.Fatal("big row carries no row data")
	}
	// Merge the stored values into an update that left them out.
	upd := []model.Value{model.Text("t2"), model.Text("l2"), model.Null(), model.Int(0), model.Null()}
	complete, err := MergeRowData(spec, cs[1].RowData, upd, []int{2})
	if err != nil || !complete {
		t.Fatalf("merge: complete %v, err %v", complete, err)
	}
	if !upd[2].Equal(big[2]) || upd[1].Str() != "l2" {
		t.Fatalf("merged row %v", upd)
	}
	// created_at was NULL, so it is not stored: the merge says so.
	complete, err = MergeRowData(spec, cs[1].RowData, upd, []int{4})
	if err != nil || complete {
		t.Fatalf("merge of an unstored column: complete %v, err %v", complete, err)
	}
	// Non-toastable tables never carry data.
	_, plain := todoSpecs(t)
	pb := NewBuilder(plain)
	if cs, _ := pb.Upsert(big, nil); cs[0].RowData != nil {
		t.Fatal("a table without TOASTable columns carries row data")
	}
}

func TestRowDataRoundTripsEveryKind(t *testing.T) {
	spec := &TableSpec{Columns: []string{"i", "r", "s", "b", "n"}, Toast: []int{0, 1, 2, 3, 4}}
	row := []model.Value{model.Int(-42), model.Real(2.5), model.Text("héllo"), model.Blob([]byte{0, 1, 2}), model.Null()}
	data := AppendRowData(nil, spec, row)
	got := make([]model.Value, len(row))
	complete, err := MergeRowData(spec, data, got, []int{0, 1, 2, 3})
	if err != nil || !complete {
		t.Fatalf("complete %v, err %v", complete, err)
	}
	for i := range 4 {
		if !got[i].Equal(row[i]) {
			t.Errorf("column %d: %v, want %v", i, got[i], row[i])
		}
	}
	if _, err := MergeRowData(spec, data[:len(data)-1], got, []int{3}); err == nil {
		t.Error("truncated data merged without error")
	}
	if _, err := MergeRowData(spec, []byte{9}, got, []int{0}); err == nil {
		t.Error("unknown version merged without error")
	}
}

// FuzzMergeRowData feeds arbitrary stored bytes to the decoder: it must
// return an error or values, never panic.
func FuzzMergeRowData(f *testing.F) {
	spec := &TableSpec{Columns: []string{"i", "r", "s", "b"}, Toast: []int{0, 1, 2, 3}}
	f.Add(AppendRowData(nil, spec, []model.Value{model.Int(1), model.Real(1), model.Text("x"), model.Blob([]byte("y"))}))
	f.Add([]byte{1, 1, 's', byte(model.KindText), 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 's'}) // name length 2^64-1
	f.Fuzz(func(t *testing.T, data []byte) {
		row := make([]model.Value, 4)
		_, _ = MergeRowData(spec, data, row, []int{0, 1, 2, 3})
	})
}
