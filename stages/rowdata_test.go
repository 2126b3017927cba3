package stages

import (
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/stages/syncrules"
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
	small := []syncrules.Value{syncrules.Text("t1"), syncrules.Text("l1"), syncrules.Text("milk"),
		syncrules.Bool(true), syncrules.Null()}
	big := []syncrules.Value{syncrules.Text("t2"), syncrules.Text("l1"), syncrules.Text(strings.Repeat("milk ", 100)),
		syncrules.Int(7), syncrules.Null()}
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
	upd := []syncrules.Value{syncrules.Text("t2"), syncrules.Text("l2"), syncrules.Null(), syncrules.Int(0), syncrules.Null()}
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
	row := []syncrules.Value{syncrules.Int(-42), syncrules.Real(2.5), syncrules.Text("héllo"), syncrules.Blob([]byte{0, 1, 2}), syncrules.Null()}
	data := AppendRowData(nil, spec, row)
	got := make([]syncrules.Value, len(row))
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
	f.Add(AppendRowData(nil, spec, []syncrules.Value{syncrules.Int(1), syncrules.Real(1), syncrules.Text("x"), syncrules.Blob([]byte("y"))}))
	f.Add([]byte{1, 1, 's', byte(syncrules.KindText), 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 's'}) // name length 2^64-1
	f.Fuzz(func(t *testing.T, data []byte) {
		row := make([]syncrules.Value, 4)
		_, _ = MergeRowData(spec, data, row, []int{0, 1, 2, 3})
	})
}
