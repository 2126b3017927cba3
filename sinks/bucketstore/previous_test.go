package bucketstore

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// binaryArray encodes elements as PostgreSQL's binary array of oid, the
// way the server sends one and copyBuf writes one (without the length).
func binaryArray(oid uint32, elements ...[]byte) []byte {
	var c copyBuf
	start := c.beginArray(oid, len(elements))
	for _, e := range elements {
		c.elem(e)
	}
	c.endArray(start)
	return c.buf[4:]
}

func TestArrayElements(t *testing.T) {
	for _, want := range [][][]byte{nil, {[]byte("a")}, {[]byte("1#by_list[\"x\"]\x1ftodos\x1f7"), {}, []byte("z")}} {
		a := binaryArray(oidText, want...)
		n, err := arrayLen(a)
		if err != nil || n != len(want) || count(a) != len(want) {
			t.Fatalf("arrayLen(%v) = %d, %v; count %d", want, n, err, count(a))
		}
		var got [][]byte
		elems(a, func(e []byte) bool { got = append(got, e); return true })
		if len(got) != len(want) {
			t.Fatalf("elems gave %q, want %q", got, want)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("elems gave %q, want %q", got, want)
			}
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, 11), binary.BigEndian.AppendUint32(nil, 2)} {
		if _, err := arrayLen(append(bad, make([]byte, 20)...)[:len(bad)]); err == nil {
			t.Errorf("arrayLen(%x) accepted it", bad)
		}
	}
	cut := binaryArray(oidText, []byte("abc"))
	if _, err := arrayLen(cut[:len(cut)-1]); err == nil {
		t.Error("arrayLen accepted an array cut short")
	}
}

// FuzzArrayLen feeds arbitrary bytes to the stored-state decoder: it must
// never panic, and whatever it accepts, elems and count walk in full.
func FuzzArrayLen(f *testing.F) {
	f.Add(binaryArray(oidText, []byte("a\x1fb\x1fc")))
	f.Add(binaryArray(oidBytea))
	f.Add(binaryArray(oidBytea, []byte{0, 1}, nil, []byte("k")))
	f.Fuzz(func(t *testing.T, a []byte) {
		n, err := arrayLen(a)
		if err != nil {
			return
		}
		seen := 0
		elems(a, func([]byte) bool { seen++; return true })
		if seen != n || count(a) != n {
			t.Fatalf("arrayLen %d, elems %d, count %d", n, seen, count(a))
		}
	})
}

// TestPrevStateSame checks the stored state's comparison with a change
// in every storage version's membership encoding: v3's in each of its
// modes that one membership can take (a table-typed UUID object, and
// another object).
func TestPrevStateSame(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version int
		table   string // the table's name
		id      string // the object id
	}{
		{"v1", storageV1, "", "7"},
		{"v2", storageV2, "", "7"},
		{"v2 table uuid", storageV2, "todos", "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"},
		{"v3", storageV3, "", "7"},
		{"v3 table uuid", storageV3, "todos", "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			todos := &model.Table{ID: "t1", Name: tc.table}
			put := model.Put{Bucket: `1#by_list["a"]`, ObjectType: "todos", ObjectID: tc.id}
			moved, other := put, put
			moved.Bucket = `1#by_list["b"]`
			other.ObjectID = "0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2f"
			ids := map[string]int64{put.Bucket: 5, moved.Bucket: 6}
			l := layouts[tc.version]
			var stored []byte
			if l.interned {
				stored = appendMembers(nil, l.compactMembers, []model.Put{put}, todos.Name, ids)
			} else {
				stored, ids = binaryArray(oidText, []byte(put.Bucket+"\x1f"+put.ObjectType+"\x1f"+put.ObjectID)), nil
			}
			s := prevState{packed: l.interned, compact: l.compactMembers}
			s.reset(1)
			ctid := []byte{0, 0, 0, 3, 0, 9}
			ord := binary.BigEndian.AppendUint64(nil, 1)
			if err := s.add([][]byte{ord, ctid, stored, nil, nil}); err != nil {
				t.Fatal(err)
			}
			p := &s.rows[0]
			if !p.found || p.tid.BlockNumber != 3 || p.tid.OffsetNumber != 9 {
				t.Fatalf("stored state %+v", p)
			}
			same := model.Change{Table: todos, Kind: model.Upsert, Puts: []model.Put{put}}
			if !s.same(p, &same, ids) {
				t.Error("the same membership reads as changed")
			}
			for name, c := range map[string]model.Change{
				"other bucket": {Table: todos, Kind: model.Upsert, Puts: []model.Put{moved}},
				"other object": {Table: todos, Kind: model.Upsert, Puts: []model.Put{other}},
				"one more":     {Table: todos, Kind: model.Upsert, Puts: []model.Put{put, moved}},
				"deleted":      {Table: todos, Kind: model.Delete},
				"lookup added": {Table: todos, Kind: model.Upsert, Puts: []model.Put{put}, Lookups: []model.Lookup{{Key: []byte("k")}}},
				"row data":     {Table: todos, Kind: model.Upsert, Puts: []model.Put{put}, RowData: []byte{1}},
			} {
				if s.same(p, &c, ids) {
					t.Errorf("%s: reads as the same", name)
				}
			}
			for _, bad := range [][][]byte{
				{binary.BigEndian.AppendUint64(nil, 2), ctid, stored, nil, nil}, // ordinal past the batch
				{ord, ctid[:5], stored, nil, nil},
				{ord, ctid, nil, nil, nil},
				{ord, ctid, stored[:len(stored)-1], nil, nil}, // cut short
			} {
				if err := s.add(bad); err == nil {
					t.Errorf("add(%x) accepted it", bad)
				}
			}
		})
	}
}

func TestCollapseKeepsLastChangePerRow(t *testing.T) {
	a, b := &model.Table{ID: "a"}, &model.Table{ID: "b"}
	b2 := &model.Table{ID: "b"} // the same table id from another pointer
	changes := []model.Change{
		{Table: b, Key: key(2), Kind: model.Upsert},
		{Table: a, Key: key(1), Kind: model.Upsert},
		{Table: b2, Key: key(2), Kind: model.Delete},
		{Table: a, Key: key(3), Kind: model.Upsert},
		{Table: a, Key: key(1), Kind: model.Delete},
		{Table: b, Key: key(2), Kind: model.Upsert, RowData: []byte("last")},
	}
	final, _ := collapse(nil, nil, changes)
	want := []*model.Change{&changes[4], &changes[3], &changes[5]}
	if k1, k3 := key(1), key(3); bytes.Compare(k1[:], k3[:]) > 0 {
		want[0], want[1] = want[1], want[0]
	}
	if len(final) != len(want) {
		t.Fatalf("collapse kept %d changes, want %d", len(final), len(want))
	}
	for i := range want {
		if final[i] != want[i] {
			t.Errorf("collapse[%d] = %+v, want %+v", i, *final[i], *want[i])
		}
	}
}
