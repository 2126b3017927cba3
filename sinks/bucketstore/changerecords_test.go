package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// changeRow is one stored change record as tests read it.
type changeRow struct {
	low, high        int64
	buckets, lookups []string // nil: NULL (unknown)
	nullB, nullL     bool
}

func changeRows(t testing.TB, s *Store, group int) []changeRow {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT op_low, op_high, buckets IS NULL, coalesce(buckets, '{}'),
		lookups IS NULL, ARRAY(SELECT convert_from(k, 'UTF8') FROM unnest(lookups) k ORDER BY 1)
		FROM bucket_changes WHERE group_id = $1 ORDER BY op_low`, group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []changeRow
	for rows.Next() {
		var r changeRow
		if err := rows.Scan(&r.low, &r.high, &r.nullB, &r.buckets, &r.nullL, &r.lookups); err != nil {
			t.Fatal(err)
		}
		slices.Sort(r.buckets)
		if r.nullB {
			r.buckets = nil
		}
		if r.nullL {
			r.lookups = nil
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChangeRecordsPerWritePath checks the record each writer path leaves:
// snapshot batches "unknown" buckets, stream batches exactly the buckets
// they PUT to or REMOVEd from and the lookups they wrote or retracted,
// truncation its REMOVEs' buckets, writes without ops nothing, and Clear
// deletes the records and moves the group's horizon past them.
func TestChangeRecordsPerWritePath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	lists := registerTable(t, s, g.ID, "lists")

	snap, err := w.WriteSnapshot(ctx, []model.Change{
		{Table: todos, Kind: model.Upsert, Key: key(1), Puts: []model.Put{put("A", "todos", "1", `{}`), put("G", "todos", "1", `{}`)}},
		{Table: todos, Kind: model.Upsert, Key: key(2), Puts: []model.Put{put("B", "todos", "2", `{}`), put("G", "todos", "2", `{}`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Row 1 moves from A to C; row 2 stays in B and G; a list row writes a
	// lookup.
	stream, err := w.WriteChanges(ctx, []model.Change{
		{Table: todos, Kind: model.Upsert, Key: key(1), Puts: []model.Put{put("C", "todos", "1", `{"v":2}`), put("G", "todos", "1", `{"v":2}`)}},
		{Table: lists, Kind: model.Upsert, Key: key(100), TracksLookups: true,
			Lookups: []model.Lookup{{Key: []byte("lk-alice"), Params: []byte(`[{"list_id":"a"}]`)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The list row changes owner: the old lookup is retracted, a new one
	// written; no ops.
	owner, err := w.WriteChanges(ctx, []model.Change{{Table: lists, Kind: model.Upsert, Key: key(100), TracksLookups: true,
		Lookups: []model.Lookup{{Key: []byte("lk-bob"), Params: []byte(`[{"list_id":"a"}]`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Deleting a row storage never had writes nothing, so records nothing.
	if res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Delete, Key: key(999)}}); err != nil || res.Ops != 0 {
		t.Fatalf("no-op delete: %+v %v", res, err)
	}
	trunc, err := w.Truncate(ctx, todos, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := changeRows(t, s, g.ID)
	want := []changeRow{
		{high: snap.MaxOpID, buckets: nil, lookups: []string{}},
		{high: stream.MaxOpID, buckets: []string{"A", "C", "G"}, lookups: []string{"lk-alice"}},
		{high: owner.MaxOpID, buckets: []string{}, lookups: []string{"lk-alice", "lk-bob"}},
		{high: trunc.MaxOpID, buckets: []string{"B", "C", "G"}, lookups: []string{}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d change records, want %d: %+v", len(got), len(want), got)
	}
	prevHigh := int64(0)
	for i := range want {
		g, w := got[i], want[i]
		if g.high != w.high || g.low > g.high || g.low <= prevHigh ||
			fmt.Sprint(g.buckets) != fmt.Sprint(w.buckets) || (g.buckets == nil) != (w.buckets == nil) ||
			fmt.Sprint(g.lookups) != fmt.Sprint(w.lookups) || (g.lookups == nil) != (w.lookups == nil) {
			t.Errorf("record %d: %+v, want %+v (op ids after %d)", i, g, w, prevHigh)
		}
		prevHigh = g.high
	}

	// Clear removes the records and marks the ops below the sequence's
	// position as not covered, so a range over them reads as unknown.
	if _, err := s.Compactor().Clear(ctx, g.ID, ClearOptions{BatchSize: 2}); err != nil {
		t.Fatal(err)
	}
	if n := len(changeRows(t, s, g.ID)); n != 0 {
		t.Fatalf("%d change records left after Clear", n)
	}
	iv, err := s.Reader().loadChanges(ctx, g.ID, stream.MaxOpID, trunc.MaxOpID)
	if err != nil {
		t.Fatal(err)
	}
	if !iv.allBuckets || !iv.allLookups {
		t.Fatalf("range before a Clear reads as %+v, want unknown", iv)
	}
}

// TestChangeRecordsPruned: Commit keeps the records of the last
// changeRetention op ids; a range reaching below the pruned horizon reads
// as unknown, a range above it is exact.
func TestChangeRecordsPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	s.Writes().changeRetention = 10 * opIDBlock // ten single-op writes (one block each)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	var cps []int64
	for i := range 30 {
		res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put(bucketName(i), "todos", fmt.Sprint(i), `{}`)}}})
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, publishAt(t, s, g.ID, uint64(10+i), res.MaxOpID).OpID)
	}
	last := cps[len(cps)-1]
	rows := changeRows(t, s, g.ID)
	if len(rows) == 0 || len(rows) > 11 {
		t.Fatalf("%d records kept, want at most the last 10 writes' worth", len(rows))
	}
	for _, r := range rows {
		// Commit prunes every changeRetention/8 ids, so the horizon may lag by that.
		if horizon := last - s.Writes().changeRetention - s.Writes().changeRetention/8; r.high <= horizon {
			t.Fatalf("record ending at %d kept below the horizon %d", r.high, horizon)
		}
	}
	old, err := s.Reader().loadChanges(ctx, g.ID, cps[0], last)
	if err != nil {
		t.Fatal(err)
	}
	if !old.allBuckets {
		t.Fatalf("a range from before the horizon reads as exact: %+v", old)
	}
	recent, err := s.Reader().loadChanges(ctx, g.ID, cps[len(cps)-3], last)
	if err != nil {
		t.Fatal(err)
	}
	if recent.allBuckets || len(recent.buckets) != 2 {
		t.Fatalf("recent range %+v, want the last 2 buckets", recent)
	}
	for _, b := range []string{bucketName(28), bucketName(29)} {
		if _, ok := recent.buckets[b]; !ok {
			t.Fatalf("recent range lacks %s: %+v", b, recent.buckets)
		}
	}
}

// TestLookupsChanged: only checkpoint ranges in which one of the asked
// lookups got an entry (or a retraction) count as changed; a snapshot
// batch with parameter entries makes its range unknown.
func TestLookupsChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	lists := registerTable(t, s, g.ID, "lists")
	readyGroup(t, s, g.ID, lists)
	list := func(i int, owner string) model.Change {
		return model.Change{Table: lists, Kind: model.Upsert, Key: key(i), TracksLookups: true,
			Puts:    []model.Put{put("G", "lists", fmt.Sprint(i), `{}`)},
			Lookups: []model.Lookup{{Key: []byte("lk-" + owner), Params: []byte(`[{"list_id":"x"}]`)}}}
	}
	commit := func(lsn uint64, cs ...model.Change) int64 {
		res, err := w.WriteChanges(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		return publishAt(t, s, g.ID, lsn, res.MaxOpID).OpID
	}
	cp1 := commit(10, list(1, "alice"))
	cp2 := commit(20, list(2, "bob"))
	cp3 := commit(30, list(3, "bob"))
	res, err := w.WriteSnapshot(ctx, []model.Change{list(4, "carol")})
	if err != nil {
		t.Fatal(err)
	}
	cp4 := publishAt(t, s, g.ID, 40, res.MaxOpID).OpID
	cache := s.Reader().NewChecksumCache(100)
	alice, bob := [][]byte{[]byte("lk-alice")}, [][]byte{[]byte("lk-bob")}
	for _, c := range []struct {
		from, to int64
		keys     [][]byte
		want     bool
	}{
		{cp1, cp2, alice, false},
		{cp1, cp2, bob, true},
		{cp2, cp3, alice, false},
		{cp1, cp3, alice, false},
		{cp3, cp3, bob, false},
		{cp3, cp4, alice, true}, // the snapshot batch's lookups are unknown
	} {
		got, err := cache.LookupsChanged(ctx, g.ID, c.from, c.to, c.keys)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("LookupsChanged(%d, %d, %s) = %v, want %v", c.from, c.to, c.keys, got, c.want)
		}
	}
	off := s.Reader().NewChecksumCache(100)
	off.DisableChangeRecords()
	if got, _ := off.LookupsChanged(ctx, g.ID, cp1, cp2, alice); !got {
		t.Error("with change records disabled, lookups must always count as changed")
	}
	if st := cache.Stats(); st.ChangeQueries != 3 {
		t.Errorf("%d change record queries, want 3 (one per new checkpoint reached: cp2, cp3, cp4)", st.ChangeQueries)
	}
}
