package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

func states(gs []Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Rules+":"+string(g.State))
	}
	return out
}

// TestEnsureGroupLifecycle walks a rules change: the new rules replicate
// in a PROCESSING group next to the ACTIVE one, take over on their first
// checkpoint, and a superseded PROCESSING group is stopped.
func TestEnsureGroupLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	s, err := Open(ctx, Config{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gs, err := s.Catalog().EnsureGroup(ctx, "v1", "sp_")
	if err != nil || len(gs) != 1 || gs[0].State != StateProcessing {
		t.Fatalf("first ensure: %v %v", states(gs), err)
	}
	v1 := gs[0].ID
	if err := s.Catalog().MarkSnapshotDone(ctx, v1, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Writes().Commit(ctx, v1, 20, 0); err != nil || !ok {
		t.Fatalf("first checkpoint: %v %v", ok, err)
	}
	gs, _ = s.Catalog().EnsureGroup(ctx, "v1", "sp_")
	if len(gs) != 1 || gs[0].ID != v1 || gs[0].State != StateActive {
		t.Fatalf("same rules: %v", states(gs))
	}
	gs, _ = s.Catalog().EnsureGroup(ctx, "v2", "sp_")
	if got := states(gs); len(got) != 2 || got[0] != "v1:ACTIVE" || got[1] != "v2:PROCESSING" {
		t.Fatalf("rules changed: %v", got)
	}
	gs, _ = s.Catalog().EnsureGroup(ctx, "v3", "sp_") // v2 is superseded before it finished
	if got := states(gs); len(got) != 2 || got[0] != "v1:ACTIVE" || got[1] != "v3:PROCESSING" {
		t.Fatalf("rules changed again: %v", got)
	}
	v3 := gs[1].ID
	if err := s.Catalog().MarkSnapshotDone(ctx, v3, 30); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Writes().Commit(ctx, v3, pglogrepl.LSN(40), 0); err != nil || !ok {
		t.Fatalf("v3 checkpoint: %v %v", ok, err)
	}
	gs, _ = s.Catalog().EnsureGroup(ctx, "v3", "sp_")
	if got := states(gs); len(got) != 1 || got[0] != "v3:ACTIVE" {
		t.Fatalf("after v3 caught up: %v", got)
	}
	old, _ := s.Catalog().Group(ctx, v1)
	if old.State != StateStop {
		t.Fatalf("v1 state %s, want STOP", old.State)
	}
}

func TestPlanRangesKeepsFirstPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	tbl := registerTable(t, s, g.ID, "todos")
	plan := []KeyRange{{Upper: []string{"100"}}, {Lower: []string{"100"}, Upper: []string{"200"}}, {Lower: []string{"200"}}}
	got, err := s.Catalog().PlanRanges(ctx, tbl.ID, plan)
	if err != nil || len(got) != 3 || got[1].Lower[0] != "100" || got[1].Upper[0] != "200" || got[0].Lower != nil || got[2].Upper != nil {
		t.Fatalf("plan = %+v, %v", got, err)
	}
	again, err := s.Catalog().PlanRanges(ctx, tbl.ID, []KeyRange{{}})
	if err != nil || len(again) != 3 {
		t.Fatalf("re-plan replaced the stored plan: %+v %v", again, err)
	}
	if err := s.Writes().Sink(g.ID).MakeDurable(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReplaceGroup replaces an active group from several processes at
// once: exactly one replacement with the same rules and a new slot is
// created, EnsureGroup keeps it next to the active group, and its first
// checkpoint stops the replaced group.
func TestReplaceGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{URI: pgtest.NewDB(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gs, err := s.Catalog().EnsureGroup(ctx, "v1", "sp_")
	if err != nil {
		t.Fatal(err)
	}
	old := gs[0]
	if err := s.Catalog().MarkSnapshotDone(ctx, old.ID, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Writes().Commit(ctx, old.ID, 20, 0); err != nil || !ok {
		t.Fatalf("activate: %v %v", ok, err)
	}
	type result struct {
		g       Group
		created bool
		err     error
	}
	results := make(chan result, 4)
	for range 4 {
		go func() {
			g, created, err := s.Catalog().ReplaceGroup(ctx, old, "sp_")
			results <- result{g, created, err}
		}()
	}
	var created int
	var ids []int
	for range 4 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.created {
			created++
		}
		ids = append(ids, r.g.ID)
		if r.g.Rules != "v1" || r.g.State != StateProcessing || r.g.SlotName == old.SlotName {
			t.Fatalf("replacement %+v", r.g)
		}
	}
	if created != 1 || ids[0] != ids[1] || ids[1] != ids[2] || ids[2] != ids[3] {
		t.Fatalf("created %d replacements, ids %v; want one", created, ids)
	}
	gs, err = s.Catalog().EnsureGroup(ctx, "v1", "sp_")
	if err != nil || len(gs) != 2 || gs[0].ID != old.ID || gs[1].ID != ids[0] {
		t.Fatalf("ensure after replacement: %v %v", states(gs), err)
	}
	if started, err := s.Catalog().SnapshotStarted(ctx, ids[0]); err != nil || started {
		t.Fatalf("replacement snapshot started = %v, %v", started, err)
	}
	if err := s.Catalog().MarkSnapshotDone(ctx, ids[0], 30); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Writes().Commit(ctx, ids[0], 40, 0); err != nil || !ok {
		t.Fatalf("replacement's first checkpoint: %v %v", ok, err)
	}
	if g, err := s.Catalog().Group(ctx, old.ID); err != nil || g.State != StateStop {
		t.Fatalf("replaced group: %+v %v, want STOP", g, err)
	}
}

// TestEnsureGroupConcurrentStartsAgree: processes starting at the same
// moment with the same rules end up with one group between them.
func TestEnsureGroupConcurrentStartsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	const procs = 4
	stores := openStores(ctx, t, uri, procs)
	var wg sync.WaitGroup
	ids := make([][]int, procs)
	for i, s := range stores {
		wg.Go(func() {
			gs, err := s.Catalog().EnsureGroup(ctx, "bucket_definitions: {}", "syncpipe_")
			if err != nil {
				t.Error(err)
				return
			}
			for _, g := range gs {
				ids[i] = append(ids[i], g.ID)
			}
		})
	}
	wg.Wait()
	all, err := stores[0].Catalog().Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("%d groups after %d concurrent starts, want 1 (each got %v)", len(all), procs, ids)
	}
}

// TestRegisterTableConcurrently: processes registering the same tables at
// the same moment all get the one stored table (an insert that waited
// for another's and did nothing cannot see its row in its own snapshot).
func TestRegisterTableConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	const procs, tables = 4, 50
	stores := openStores(ctx, t, uri, procs)
	gs, err := stores[0].Catalog().EnsureGroup(ctx, "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	group := gs[0].ID
	ids := make([][]string, procs)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			for n := range tables {
				st, err := s.Catalog().RegisterTable(ctx, group, uint32(1000+n), "public", fmt.Sprintf("t%02d", n), []string{"id"})
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = append(ids[i], st.ID)
			}
		})
	}
	wg.Wait()
	for i := 1; i < procs; i++ {
		if !slices.Equal(ids[i], ids[0]) {
			t.Fatalf("process %d got other table ids than process 0:\n%v\n%v", i, ids[i], ids[0])
		}
	}
}

// openStores opens n stores on uri, as n processes would, closed at the
// end of the test.
func openStores(ctx context.Context, t *testing.T, uri string, n int) []*Store {
	t.Helper()
	stores := make([]*Store, n)
	for i := range stores {
		s, err := Open(ctx, Config{URI: uri})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores[i] = s
	}
	return stores
}
