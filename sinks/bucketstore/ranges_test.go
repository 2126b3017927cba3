package bucketstore

import (
	"context"
	"slices"
	"testing"
)

// TestStoredRanges: one read returns the plans of the tables that have
// one, with their progress, and nothing for a table not planned yet.
func TestStoredRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	a := registerTable(t, s, g.ID, "a")
	b := registerTable(t, s, g.ID, "b")
	c := registerTable(t, s, g.ID, "c")
	planA := []KeyRange{{Upper: []string{"10"}}, {Lower: []string{"10"}, Upper: []string{"20"}}, {Lower: []string{"20"}}}
	if _, err := s.Catalog().PlanRanges(ctx, a.ID, planA); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Catalog().PlanRanges(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE snapshot_ranges SET last_key = '{15}', rows_done = 5 WHERE source_table_id = $1 AND range_no = 1`, a.ID); err != nil {
		t.Fatal(err)
	}
	plans, err := s.Catalog().StoredRanges(ctx, []string{a.ID, b.ID, c.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 || len(plans[a.ID]) != 3 || len(plans[b.ID]) != 1 || plans[c.ID] != nil {
		t.Fatalf("plans: %+v; want 3 ranges of a, 1 of b, none of c", plans)
	}
	for i, st := range plans[a.ID] {
		if st.No != i || !slices.Equal(st.Lower, planA[i].Lower) || !slices.Equal(st.Upper, planA[i].Upper) {
			t.Fatalf("range %d of a: %+v, want %+v", i, st, planA[i])
		}
	}
	if mid := plans[a.ID][1]; !slices.Equal(mid.LastKey, []string{"15"}) || mid.RowsDone != 5 || mid.Done {
		t.Fatalf("progress of range 1 of a: %+v", mid)
	}
	if first := plans[a.ID][0]; first.LastKey != nil || first.Lower != nil {
		t.Fatalf("range 0 of a carries another range's keys: %+v", first)
	}
}
