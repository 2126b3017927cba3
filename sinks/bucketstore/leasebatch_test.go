package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestClaimSnapshotUnits: one claim tells done ranges and ranges another
// live owner holds apart from free ones, takes at most its limit of the
// free ones in the order asked, and renews (same token) those its owner
// holds already; a steal takes units claimed ahead and not started;
// RenewLeases names the leases lost and ReleaseLeases
// frees them for others at once.
func TestClaimSnapshotUnits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	gs, err := s.Catalog().EnsureGroup(ctx, "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := s.Catalog().RegisterTable(ctx, gs[0].ID, 1, "public", "t", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Catalog().PlanRanges(ctx, tbl.ID, make([]KeyRange, 5)); err != nil {
		t.Fatal(err)
	}
	units := make([]SnapshotUnit, 6) // range 5 is not planned: not done
	for i := range units {
		units[i] = SnapshotUnit{Lease: fmt.Sprintf("snapshot/%s/%d", tbl.ID, i), TableID: tbl.ID, RangeNo: i}
	}
	if _, err := s.pool.Exec(ctx, `UPDATE snapshot_ranges SET done = true WHERE source_table_id = $1 AND range_no = 1`, tbl.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Leases().AcquireLease(ctx, units[2].Lease, "proc-b", time.Hour); err != nil || !ok {
		t.Fatal(ok, err)
	}
	claim := func(owner string, limit int) []UnitClaim {
		t.Helper()
		got, err := s.Leases().ClaimSnapshotUnits(ctx, owner, time.Hour, units, limit, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(units) {
			t.Fatalf("%d answers for %d units", len(got), len(units))
		}
		return got
	}
	got := claim("proc-a", 2)
	want := []string{"claimed", "done", "elsewhere", "claimed", "free", "free"}
	if st := claimStates(got); !slices.Equal(st, want) {
		t.Fatalf("first claim: %v, want %v", st, want)
	}
	// Claimed ahead is pending for autoscaling until the unit resumes.
	counts := func(wantPending, wantActive int64) {
		t.Helper()
		c, err := s.Leases().UnitCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.PendingSnapshots != wantPending || c.ActiveSnapshots != wantActive {
			t.Fatalf("pending %d, active %d snapshot units; want %d, %d", c.PendingSnapshots, c.ActiveSnapshots, wantPending, wantActive)
		}
	}
	counts(3, 1) // ranges 0, 3, 4 pending; 2 held by proc-b (a claim of its own)
	if _, _, err := s.Writes().FencedSink(gs[0].ID, FenceOf(got[0].Lease)).Resume(ctx, "public.t", 0); err != nil {
		t.Fatal(err)
	}
	counts(2, 2)
	again := claim("proc-a", 3)
	if st := claimStates(again); !slices.Equal(st, []string{"claimed", "done", "elsewhere", "claimed", "claimed", "free"}) ||
		again[0].Lease.Token != got[0].Lease.Token || again[3].Lease.Token != got[3].Lease.Token {
		t.Fatalf("second claim: %v (tokens %d, %d; were %d, %d)", st,
			again[0].Lease.Token, again[3].Lease.Token, got[0].Lease.Token, got[3].Lease.Token)
	}
	byB := claim("proc-b", 8)
	if st := claimStates(byB); !slices.Equal(st, []string{"elsewhere", "done", "claimed", "elsewhere", "elsewhere", "claimed"}) {
		t.Fatalf("proc-b's claim: %v", st)
	}
	held := []Lease{got[0].Lease, got[3].Lease, again[4].Lease}
	stale := got[3].Lease
	stale.Token-- // as if taken over since
	lost, err := s.Leases().RenewLeases(ctx, "proc-a", []Lease{held[0], stale, held[2]}, time.Hour)
	if err != nil || !slices.Equal(lost, []string{stale.Name}) {
		t.Fatalf("renew: lost %v, %v; want [%s]", lost, err, stale.Name)
	}
	if err := s.Leases().ReleaseLeases(ctx, "proc-a", held); err != nil {
		t.Fatal(err)
	}
	if lost, err := s.Leases().RenewLeases(ctx, "proc-a", held, time.Hour); err != nil || len(lost) != len(held) {
		t.Fatalf("renewed released leases: lost %v, %v", lost, err)
	}
	after := claim("proc-c", 8)
	if st := claimStates(after); !slices.Equal(st, []string{"claimed", "done", "elsewhere", "claimed", "claimed", "elsewhere"}) {
		t.Fatalf("claim after release: %v", st)
	}
	if after[0].Lease.Takeover || after[0].Lease.Token <= got[0].Lease.Token {
		t.Fatalf("a released lease claimed again: %+v (was token %d)", after[0].Lease, got[0].Lease.Token)
	}
	// A steal takes what proc-b claimed ahead (5), not what it started (2).
	stolen, err := s.Leases().ClaimSnapshotUnits(ctx, "proc-a", time.Hour, []SnapshotUnit{units[2], units[5]}, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if st := claimStates(stolen); !slices.Equal(st, []string{"elsewhere", "claimed"}) || !stolen[1].Lease.Takeover {
		t.Fatalf("steal: %v, takeover %v", st, stolen[1].Lease.Takeover)
	}
	// proc-b learns it as its unit resumes, before it reads anything.
	if _, _, err := s.Writes().FencedSink(gs[0].ID, FenceOf(byB[5].Lease)).Resume(ctx, "public.t", 5); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("resume under a stolen lease: %v, want ErrLeaseLost", err)
	}
	if _, ok, err := s.Writes().FencedSink(gs[0].ID, FenceOf(stolen[1].Lease)).Resume(ctx, "public.t", 5); err != nil || ok {
		t.Fatalf("resume of an unplanned range by its holder: %v %v, want nothing stored", ok, err)
	}
	// The answers tell whether the table is marked snapshot done.
	if slices.ContainsFunc(after, func(c UnitClaim) bool { return c.TableDone }) {
		t.Fatal("a claim reported the table done before it was marked")
	}
	if err := s.Catalog().MarkTableSnapshotDone(ctx, tbl.ID, 100); err != nil {
		t.Fatal(err)
	}
	if marked := claim("proc-d", 0); !marked[1].Done || !marked[1].TableDone {
		t.Fatalf("claim after the table was marked: %+v, want range 1 done and its table done", marked[1])
	}
}

// claimStates names each answer's state.
func claimStates(cs []UnitClaim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		switch {
		case c.Claimed:
			out[i] = "claimed"
		case c.Done:
			out[i] = "done"
		case c.Elsewhere:
			out[i] = "elsewhere"
		default:
			out[i] = "free"
		}
	}
	return out
}
