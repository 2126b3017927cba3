package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestObjectIDsReadBackExactly writes rows whose object ids are canonical
// UUIDs (stored as 16 bytes in v2) and ids that only resemble one (kept
// as text), moves them to another bucket (the REMOVE's id comes from the
// packed memberships), and checks that every read path gives each id
// back byte for byte, in both storage versions, and so does the object
// type, which v2 leaves out when it is the table's name ("todos") and
// keeps otherwise (here "", in the global bucket).
func TestObjectIDsReadBackExactly(t *testing.T) {
	t.Parallel()
	ids := []string{
		"0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e",
		"00000000-0000-0000-0000-000000000000",
		"0B1E5F0C-3A4D-4C2B-9F1E-7D6A5B4C3D2E",   // upper case
		"0b1e5f0c3a4d4c2b9f1e7d6a5b4c3d2e",       // no hyphens
		"{0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2e}", // braces
		"0b1e5f0c-3a4d-4c2b-9f1e-7d6a5b4c3d2g",   // not hex
		"t1",
		"",
	}
	onVersions(t, func(t *testing.T, s *Store, g Group) {
		ctx := context.Background()
		todos := registerTable(t, s, g.ID, "todos")
		readyGroup(t, s, g.ID, todos)
		w := newWriter(t, s, g.ID)
		var first, moved []model.Change
		for i, id := range ids {
			data := `{"id":"` + id + `"}`
			first = append(first, model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
				Puts: []model.Put{put(`1#by_list["a"]`, "todos", id, data), put(`1#global[]`, "", id, data)}})
			moved = append(moved, model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
				Puts: []model.Put{put(`1#by_list["b"]`, "todos", id, data), put(`1#global[]`, "", id, data)}})
		}
		if _, err := w.WriteSnapshot(ctx, first); err != nil {
			t.Fatal(err)
		}
		res, err := w.WriteChanges(ctx, moved)
		if err != nil {
			t.Fatal(err)
		}
		cp := publishAt(t, s, g.ID, 10, res.MaxOpID)
		want := map[string][]string{}
		for _, id := range ids {
			want[`1#by_list["a"]`] = append(want[`1#by_list["a"]`], "PUT todos/"+id, "REMOVE todos/"+id)
			want[`1#by_list["b"]`] = append(want[`1#by_list["b"]`], "PUT todos/"+id)
			want[`1#global[]`] = append(want[`1#global[]`], "PUT /"+id, "PUT /"+id)
		}
		for _, shape := range []ReadShape{ReadLateral, ReadORChain} {
			got := map[string][]string{}
			reqs := []BucketRequest{{Bucket: `1#by_list["a"]`}, {Bucket: `1#by_list["b"]`}, {Bucket: `1#global[]`}}
			if _, err := s.Reader().ReadBucketDataShape(ctx, shape, g.ID, cp.OpID, reqs, 1000, func(r *OpRow) error {
				got[r.Bucket] = append(got[r.Bucket], map[int16]string{OpPut: "PUT", OpRemove: "REMOVE"}[r.Op]+" "+r.ObjectType+"/"+r.ObjectID)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for b := range want {
				slices.Sort(want[b])
				slices.Sort(got[b])
				if fmt.Sprint(got[b]) != fmt.Sprint(want[b]) {
					t.Errorf("shape %d, bucket %s: read %q, want %q", shape, b, got[b], want[b])
				}
			}
		}
		var viewed []string
		for _, o := range ops(t, s, g.ID) {
			if o.Bucket == `1#by_list["b"]` {
				viewed = append(viewed, o.ObjectID)
			}
		}
		wantIDs := slices.Clone(ids)
		slices.Sort(wantIDs)
		slices.Sort(viewed)
		if fmt.Sprint(viewed) != fmt.Sprint(wantIDs) {
			t.Errorf("bucket_ops shows ids %q, want %q", viewed, wantIDs)
		}
		if g.StorageVersion >= storageV2 {
			var packed int
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM bucket_data2 WHERE group_id = $1 AND object_uuid IS NOT NULL`, g.ID).Scan(&packed); err != nil {
				t.Fatal(err)
			}
			// Two canonical ids, each in 2 PUTs of the snapshot and a
			// REMOVE and 2 PUTs of the move.
			if packed != 2*5 {
				t.Errorf("%d ops keep their id as 16 bytes, want %d", packed, 2*5)
			}
		}
	})
}
