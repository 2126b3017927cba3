package bucketstore

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestCoveredRows checks where a v4 group keeps each kind of row's state
// and that the stream reads it back from either place: a light row (a
// few memberships) in members, inside the primary key; a row with
// lookups, with row data, or in many buckets in buckets, in the heap. A
// stream write then moves every row to another bucket, after settle (so
// light rows are read by the index-only probe), and must REMOVE each from
// where it was, and a second write of the same state must write no
// current row (each reads as unchanged).
func TestCoveredRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	if !testLayout(t, s, g.ID).covering {
		t.Fatalf("storage version %d has no covering key", g.StorageVersion)
	}
	todos := registerTable(t, s, g.ID, "todos")
	row := func(i int, bucket string, many bool) model.Change {
		c := model.Change{Table: todos, Kind: model.Upsert, Key: key(i), KeyOrder: int32(i),
			Puts: []model.Put{put(bucket, "todos", fmt.Sprint(i), `{}`)}}
		if many {
			for b := range 80 {
				c.Puts = append(c.Puts, put(fmt.Sprintf(`1#many["%d"]`, b), "todos", fmt.Sprint(i), `{}`))
			}
		}
		return c
	}
	rows := func(bucket string) []model.Change {
		light, lookups, data, many := row(1, bucket, false), row(2, bucket, false), row(3, bucket, false), row(4, bucket, true)
		lookups.TracksLookups = true
		lookups.Lookups = []model.Lookup{{Key: []byte("lk"), Params: []byte(`[]`)}}
		data.RowData = []byte(`{"big":"…"}`)
		return []model.Change{light, lookups, data, many}
	}
	w := newWriter(t, s, g.ID)
	if _, err := w.WriteSnapshot(ctx, rows(`1#a[]`)); err != nil {
		t.Fatal(err)
	}
	var inKey []int32
	err := s.pool.QueryRow(ctx, `SELECT array_agg(key_order ORDER BY key_order) FILTER (WHERE members IS NOT NULL AND buckets IS NULL)
		FROM current_data3 WHERE group_id = $1`, g.ID).Scan(&inKey)
	if err != nil || len(inKey) != 1 || inKey[0] != 1 {
		t.Fatalf("rows with their memberships in the key: %v (%v), want only the light row 1", inKey, err)
	}
	if _, err := s.Catalog().settle(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	before := len(ops(t, s, g.ID))
	if _, err := w.WriteChanges(ctx, rows(`1#b[]`)); err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, o := range ops(t, s, g.ID)[before:] {
		if o.Op == OpRemove && o.Bucket == `1#a[]` {
			removed[o.ObjectID] = true
		}
	}
	if len(removed) != 4 {
		t.Fatalf("rows removed from their old bucket: %v, want all 4", removed)
	}
	var moved int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM current_data3 WHERE group_id = $1`, g.ID).Scan(&moved); err != nil || moved != 4 {
		t.Fatalf("%d current rows after the move (%v), want 4", moved, err)
	}
	res, err := w.WriteChanges(ctx, rows(`1#b[]`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.prev.rows {
		if p := &w.prev.rows[i]; !p.found || !p.unchanged {
			t.Errorf("row %d of the same state again: %+v, want found and unchanged", i, p)
		}
	}
	if res.Ops != 4+80 {
		t.Errorf("the same state again wrote %d ops, want a PUT per membership (84)", res.Ops)
	}
}

// TestMarkSnapshotDoneSettlesOnce checks that marking a v4 group's
// snapshot done settles its current rows first — the key replaced by one
// that INCLUDEs the memberships, and every heap page all-visible — and
// that marking it
// again, as a second process finishing the same snapshot does, while the
// group streams, leaves the key alone: the rebuild would stop the
// stream's probes. Four processes marking at once settle it once.
func TestMarkSnapshotDoneSettlesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	var cs []model.Change
	for i := range 2000 {
		cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i), KeyOrder: int32(i % 7),
			Puts: []model.Put{put(fmt.Sprintf(`1#by_list["%d"]`, i%10), "todos", fmt.Sprint(i), `{}`)}})
	}
	if _, err := newWriter(t, s, g.ID).WriteSnapshot(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := s.Catalog().MarkTableSnapshotDone(ctx, todos.ID, 10); err != nil {
		t.Fatal(err)
	}
	_, cur := testLayout(t, s, g.ID).partitions(g.ID)
	state := func() (node int64, notVisible int64) {
		t.Helper()
		err := s.pool.QueryRow(ctx, `SELECT pg_relation_filenode($1::regclass)::int8,
			(SELECT (relpages - relallvisible)::int8 FROM pg_class WHERE oid = $2::regclass)`, cur+"_pkey", cur).Scan(&node, &notVisible)
		if err != nil {
			t.Fatal(err)
		}
		return node, notVisible
	}
	before, _ := state()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- s.Catalog().MarkSnapshotDone(ctx, g.ID, 20) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	settled, notVisible := state()
	if settled == before || notVisible != 0 {
		t.Fatalf("after the mark: key file %d (was %d), %d heap pages not all-visible; want a rebuilt key and none", settled, before, notVisible)
	}
	var def string
	err := s.pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, cur).Scan(&def)
	if want := "PRIMARY KEY (source_table, key_order, source_key) INCLUDE (group_id, members)"; err != nil || def != want {
		t.Fatalf("%s after the mark: %s (%v), want %s", cur, def, err, want)
	}
	if err := s.Catalog().MarkSnapshotDone(ctx, g.ID, 30); err != nil {
		t.Fatal(err)
	}
	if again, _ := state(); again != settled {
		t.Fatalf("a second mark rebuilt the key again (file %d → %d)", settled, again)
	}
}
