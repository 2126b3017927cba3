package bucketstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/model"
)

// TestUnchangedCurrentRowIsNotRewritten checks that an update which keeps
// a row's buckets, lookups and row data writes its PUT but leaves the
// stored current row alone (same tuple), while a change of any of those
// replaces it.
func TestUnchangedCurrentRowIsNotRewritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	w := newWriter(t, s, g.ID)
	tuple := func() string {
		t.Helper()
		var tid string
		if err := s.pool.QueryRow(ctx, `SELECT ctid::text || '/' || xmin::text FROM `+testLayout(t, s, g.ID).cur+` WHERE group_id = $1 AND source_key = $2`,
			g.ID, key(1)).Scan(&tid); err != nil {
			t.Fatal(err)
		}
		return tid
	}
	write := func(bucket, data string, rowData []byte) Result {
		t.Helper()
		res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Upsert, Key: key(1), RowData: rowData,
			Puts: []model.Put{put(bucket, "todos", "1", data)}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	write("1#a[]", `{"v":1}`, nil)
	before := tuple()
	if res := write("1#a[]", `{"v":2}`, nil); res.Ops != 1 {
		t.Fatalf("same-bucket update wrote %d ops, want 1 PUT", res.Ops)
	}
	if after := tuple(); after != before {
		t.Fatalf("unchanged current row rewritten: %s → %s", before, after)
	}
	if res := write("1#a[]", `{"v":3}`, []byte{1, 2}); res.Ops != 1 {
		t.Fatalf("update with new row data wrote %d ops, want 1", res.Ops)
	}
	changed := tuple()
	if changed == before {
		t.Fatal("current row not replaced when its row data changed")
	}
	if res := write("1#b[]", `{"v":4}`, []byte{1, 2}); res.Ops != 2 {
		t.Fatalf("bucket move wrote %d ops, want REMOVE + PUT", res.Ops)
	}
	if tuple() == changed {
		t.Fatal("current row not replaced when its buckets changed")
	}
	all := ops(t, s, g.ID)
	if last := all[len(all)-1]; last.Bucket != "1#b[]" || last.Op != OpPut || *last.Data != `{"v":4}` {
		t.Fatalf("last op %+v, want the PUT into 1#b[]", last)
	}
}

// TestReplicaIDChangeKeepsObject checks a row whose replica id changes but
// whose object stays (an update under REPLICA IDENTITY FULL): the batch
// deletes the old id and upserts the new one, and the object's REMOVE must
// come before its PUT, whichever of the two ids sorts first.
func TestReplicaIDChangeKeepsObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	tbl := registerTable(t, s, g.ID, "items")
	w := newWriter(t, s, g.ID)
	for i := 1; i <= 20; i++ {
		oldKey, newKey := key(2*i), key(2*i+1)
		id := fmt.Sprint(i)
		if _, err := w.WriteChanges(ctx, []model.Change{{Table: tbl, Kind: model.Upsert, Key: oldKey,
			Puts: []model.Put{put("1#a[]", "items", id, `{"v":1}`)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteChanges(ctx, []model.Change{
			{Table: tbl, Kind: model.Delete, Key: oldKey},
			{Table: tbl, Kind: model.Upsert, Key: newKey, Puts: []model.Put{put("1#a[]", "items", id, `{"v":2}`)}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	last := map[string]op{}
	for _, o := range ops(t, s, g.ID) {
		last[o.ObjectID] = o
	}
	for i := 1; i <= 20; i++ {
		if o := last[fmt.Sprint(i)]; o.Op != OpPut || o.Data == nil || *o.Data != `{"v":2}` {
			t.Fatalf("object %d: last op %+v, want the PUT of its new version", i, o)
		}
	}
}

// TestStreamWriteDrawsMoreIDsThanEstimated checks the second allocation of
// a stream write whose rows had more bucket memberships than its estimate
// (estimateIDs) allows for: deleting rows that were in 150 buckets each
// needs 300 REMOVEs, but the estimate, made before the stored state is
// read, is 2 ids per deleted row. Every op gets a distinct id, ascending
// in write order, and the change record spans exactly the ids used.
func TestStreamWriteDrawsMoreIDsThanEstimated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	w := newWriter(t, s, g.ID)
	const buckets = 150
	var rows []model.Change
	for r := 1; r <= 2; r++ {
		c := model.Change{Table: todos, Kind: model.Upsert, Key: key(r)}
		for b := range buckets {
			c.Puts = append(c.Puts, put(fmt.Sprintf(`1#b["%d"]`, b), "todos", fmt.Sprint(r), `{}`))
		}
		rows = append(rows, c)
	}
	if _, err := w.WriteChanges(ctx, rows); err != nil {
		t.Fatal(err)
	}
	before := len(ops(t, s, g.ID))
	res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Delete, Key: key(1)}, {Table: todos, Kind: model.Delete, Key: key(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 2*buckets {
		t.Fatalf("deleting 2 rows in %d buckets wrote %d ops, want %d REMOVEs", buckets, res.Ops, 2*buckets)
	}
	all := ops(t, s, g.ID)
	removes := all[before:]
	seen := map[int64]bool{}
	for i, o := range removes {
		if o.Op != OpRemove || seen[o.OpID] || (i > 0 && o.OpID <= removes[i-1].OpID) {
			t.Fatalf("op %d of the delete: %+v (ids must be distinct REMOVEs)", i, o)
		}
		seen[o.OpID] = true
	}
	var low, high int64
	if err := s.pool.QueryRow(ctx, `SELECT op_low, op_high FROM bucket_changes WHERE group_id = $1 ORDER BY op_high DESC LIMIT 1`, g.ID).
		Scan(&low, &high); err != nil {
		t.Fatal(err)
	}
	if low > removes[0].OpID || high != removes[len(removes)-1].OpID {
		t.Fatalf("change record (%d, %d] does not span the REMOVEs' ids %d…%d", low, high, removes[0].OpID, removes[len(removes)-1].OpID)
	}
}

// BenchmarkStreamWrite times stream batches of 5000 updates over 40000
// stored rows, each update moving nothing (a PUT in the same bucket): the
// common streaming case, whose current rows stay as they are.
//
//	go test -run '^$' -bench StreamWrite ./sinks/bucketstore/
func BenchmarkStreamWrite(b *testing.B) {
	ctx := context.Background()
	s, g := openStore(b)
	todos := registerTable(b, s, g.ID, "todos")
	w := newWriter(b, s, g.ID)
	const rows, batch = 40000, 5000
	mk := func(i, v int) model.Change {
		return model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put(fmt.Sprintf(`1#by_list["%d"]`, i%100), "todos", fmt.Sprint(i), fmt.Sprintf(`{"v":%d,"description":"some text of about sixty characters, like a todo has"}`, v))}}
	}
	var cs []model.Change
	for i := range rows {
		cs = append(cs, mk(i, 0))
		if len(cs) == 10000 {
			if _, err := w.WriteSnapshot(ctx, cs); err != nil {
				b.Fatal(err)
			}
			cs = cs[:0]
		}
	}
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		cs = cs[:0]
		for j := range batch {
			cs = append(cs, mk((n+j)%rows, i+1))
		}
		n += batch
		if _, err := w.WriteStream(ctx, cs, StreamProgress{LSN: pglogrepl.LSN(i + 1)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
}
