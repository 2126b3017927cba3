package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// fakeClaims is a claimStore over a map: lease name → owner.
type fakeClaims struct {
	mu       sync.Mutex
	owners   map[string]string
	done     map[string]bool
	marked   map[string]bool // done, and the table marked snapshot done
	started  map[string]bool // held by their owner and started
	claims   int             // ClaimSnapshotUnits calls
	released []string
	renewed  [][]string
}

func newFakeClaims() *fakeClaims {
	return &fakeClaims{owners: map[string]string{}, done: map[string]bool{}, marked: map[string]bool{}, started: map[string]bool{}}
}

func (f *fakeClaims) ClaimSnapshotUnits(_ context.Context, owner string, _ time.Duration, units []bucketstore.SnapshotUnit, limit int, steal bool) ([]bucketstore.UnitClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims++
	out := make([]bucketstore.UnitClaim, len(units))
	for i, u := range units {
		out[i].Unit = u
		o, held := f.owners[u.Lease]
		switch {
		case f.done[u.Lease]:
			out[i].Done, out[i].TableDone = true, f.marked[u.Lease]
		case held && o != owner && (f.started[u.Lease] || !steal):
			out[i].Elsewhere, out[i].Idle = true, !f.started[u.Lease]
		case limit > 0:
			limit--
			f.owners[u.Lease] = owner
			out[i].Claimed, out[i].Lease = true, bucketstore.Lease{Name: u.Lease, Owner: owner, Token: 1}
		}
	}
	return out, nil
}

func (f *fakeClaims) RenewLeases(_ context.Context, owner string, held []bucketstore.Lease, _ time.Duration) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = append(f.renewed, leaseNames(held))
	var lost []string
	for _, l := range held {
		if f.owners[l.Name] != owner {
			lost = append(lost, l.Name)
		}
	}
	return lost, nil
}

func (f *fakeClaims) ReleaseLeases(_ context.Context, owner string, held []bucketstore.Lease) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range held {
		if f.owners[l.Name] == owner {
			delete(f.owners, l.Name)
			f.released = append(f.released, l.Name)
		}
	}
	return nil
}

func (f *fakeClaims) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claims
}

// claimUnits makes n units of a group, rows estimated rows each.
func claimUnits(c *snapshotClaims, n int, rows int64) []*unitClaim {
	us := make([]*unitClaim, n)
	for i := range us {
		us[i] = &unitClaim{rows: rows, unit: bucketstore.SnapshotUnit{Lease: fmt.Sprintf("snapshot/t/%d", i), RangeNo: i}}
	}
	c.add(1, us)
	return us
}

// TestClaimsBatchSmallUnits: small units are claimed several per
// statement, and units found done or held elsewhere are skipped without
// one; a large range is claimed alone.
func TestClaimsBatchSmallUnits(t *testing.T) {
	ctx := context.Background()
	f := newFakeClaims()
	var acquired int
	c := newSnapshotClaims(f, "me", time.Minute, time.Minute, func(bucketstore.Lease) { acquired++ })
	us := claimUnits(c, 20, 20_000)
	f.done[us[3].unit.Lease] = true
	f.done[us[4].unit.Lease], f.marked[us[4].unit.Lease] = true, true
	f.owners[us[5].unit.Lease] = "other"
	var states []claimState
	for _, u := range us {
		st, err := c.take(ctx, 1, u)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	// 20k rows a unit: a claim takes up to 1 + 16 units, so one claim
	// takes the 17 units neither done nor held elsewhere.
	if f.calls() != 1 || acquired != 17 {
		t.Fatalf("%d claim statements, %d leases acquired for 20 units; want 1 and 17", f.calls(), acquired)
	}
	if states[3] != claimDone || states[4] != claimDone || states[5] != claimElsewhere || states[0] != claimHeld || states[19] != claimHeld {
		t.Fatalf("states %v", states)
	}
	// A done range whose table is marked needs no marking here (rangeDone).
	if c.tableMarked(us[3]) || !c.tableMarked(us[4]) || c.tableMarked(us[0]) {
		t.Fatalf("table marked: unit 3 %v, 4 %v, 0 %v; want false, true, false", c.tableMarked(us[3]), c.tableMarked(us[4]), c.tableMarked(us[0]))
	}

	big := newSnapshotClaims(newFakeClaims(), "me", time.Minute, time.Minute, func(bucketstore.Lease) {})
	bs := claimUnits(big, 3, 5_000_000)
	for _, u := range bs {
		if _, err := big.take(ctx, 1, u); err != nil {
			t.Fatal(err)
		}
	}
	if n := big.store.(*fakeClaims).calls(); n != 3 {
		t.Fatalf("large ranges: %d claim statements for 3 units, want one each", n)
	}
	if got := claimLimit(0, 0, claimAheadRows); got != 1 {
		t.Fatalf("claimLimit without an estimate = %d, want 1", got)
	}
	if got := claimLimit(20_000, claimAheadRows-50_000, claimAheadRows); got != 3 {
		t.Fatalf("claimLimit with all but 50k rows claimed ahead = %d, want 3", got)
	}
	if got := claimLimit(20_000, 2*claimAheadRows, claimAheadRows); got != 1 {
		t.Fatalf("claimLimit with more than claimAheadRows claimed ahead = %d, want 1", got)
	}
}

// TestClaimsElsewhereGoesStale: a unit seen held elsewhere is asked about
// again once half a heartbeat has passed.
func TestClaimsElsewhereGoesStale(t *testing.T) {
	ctx := context.Background()
	f := newFakeClaims()
	c := newSnapshotClaims(f, "me", time.Minute, 40*time.Millisecond, func(bucketstore.Lease) {})
	us := claimUnits(c, 1, 1_000)
	f.owners[us[0].unit.Lease] = "other"
	f.started[us[0].unit.Lease] = true
	for range 2 {
		if st, err := c.take(ctx, 1, us[0]); err != nil || st != claimElsewhere {
			t.Fatalf("take: %v %v", st, err)
		}
	}
	if f.calls() != 1 {
		t.Fatalf("%d statements while fresh, want 1", f.calls())
	}
	time.Sleep(25 * time.Millisecond) // past half the heartbeat: the one thing under test is time
	f.mu.Lock()
	delete(f.owners, us[0].unit.Lease) // the other process released it
	f.mu.Unlock()
	if st, err := c.take(ctx, 1, us[0]); err != nil || st != claimHeld || f.calls() != 2 {
		t.Fatalf("take after the other released: %v %v (%d statements)", st, err, f.calls())
	}

	// A process holding units claimed ahead does not ask about a stale
	// unit held elsewhere: it has its own work first.
	busy := newSnapshotClaims(newFakeClaims(), "me", time.Minute, 40*time.Millisecond, func(bucketstore.Lease) {})
	bf := busy.store.(*fakeClaims)
	bs := claimUnits(busy, 3, 1_000)
	bf.owners[bs[0].unit.Lease], bf.started[bs[0].unit.Lease] = "other", true
	if st, err := busy.take(ctx, 1, bs[0]); err != nil || st != claimElsewhere || bf.calls() != 1 {
		t.Fatalf("first take: %v %v (%d statements)", st, err, bf.calls())
	}
	if busy.state(bs[1]) != claimHeld || busy.state(bs[2]) != claimHeld {
		t.Fatal("the claim did not take the units after the one held elsewhere")
	}
	time.Sleep(25 * time.Millisecond) // past half the heartbeat
	if st, err := busy.take(ctx, 1, bs[0]); err != nil || st != claimElsewhere || bf.calls() != 1 {
		t.Fatalf("take of a stale unit held elsewhere with 2 units claimed ahead: %v %v (%d statements, want 1)", st, err, bf.calls())
	}
}

// TestClaimsStealIdleUnit: a process that finds nothing free takes a unit
// another claimed ahead and has not started; one it started stays there.
func TestClaimsStealIdleUnit(t *testing.T) {
	ctx := context.Background()
	f := newFakeClaims()
	c := newSnapshotClaims(f, "me", time.Minute, time.Minute, func(bucketstore.Lease) {})
	us := claimUnits(c, 3, 1_000)
	for _, u := range us {
		f.owners[u.unit.Lease] = "other"
	}
	f.started[us[0].unit.Lease] = true
	if st, err := c.take(ctx, 1, us[1]); err != nil || st != claimHeld {
		t.Fatalf("a unit another process claimed ahead, nothing else free: %v %v", st, err)
	}
	if st, err := c.take(ctx, 1, us[0]); err != nil || st != claimElsewhere {
		t.Fatalf("a unit another process works on: %v %v", st, err)
	}
	if f.owners[us[1].unit.Lease] != "me" || f.owners[us[2].unit.Lease] != "other" {
		t.Fatalf("owners after the steal: %v", f.owners)
	}
}

// TestClaimsLoseAndFinish: a lease renewal finds lost cancels its running
// unit with ErrLeaseLost; an unfinished unit releases its lease, a
// finished one does not; leases claimed ahead are released when keep
// stops.
func TestClaimsLoseAndFinish(t *testing.T) {
	ctx := context.Background()
	f := newFakeClaims()
	c := newSnapshotClaims(f, "me", time.Minute, 10*time.Millisecond, func(bucketstore.Lease) {})
	us := claimUnits(c, 4, 100) // small enough that a 10 ms heartbeat's budget claims all four
	if st, err := c.take(ctx, 1, us[0]); err != nil || st != claimHeld {
		t.Fatal(st, err)
	}
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if _, err := c.start(us[0], cancel); err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() { defer close(kept); c.keep(kctx) }()
	f.mu.Lock()
	f.owners[us[0].unit.Lease] = "other" // taken over
	f.mu.Unlock()
	<-uctx.Done()
	if !errors.Is(context.Cause(uctx), bucketstore.ErrLeaseLost) {
		t.Fatalf("running unit ended with %v", context.Cause(uctx))
	}
	if err := c.finish(ctx, us[0], false); err != nil {
		t.Fatal(err)
	}
	for _, u := range us[1:3] {
		if _, err := c.start(u, func(error) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.finish(ctx, us[1], true); err != nil {
		t.Fatal(err)
	}
	if err := c.finish(ctx, us[2], false); err != nil {
		t.Fatal(err)
	}
	stop()
	<-kept
	f.mu.Lock()
	defer f.mu.Unlock()
	slices.Sort(f.released)
	if want := []string{us[2].unit.Lease, us[3].unit.Lease}; !slices.Equal(f.released, want) {
		t.Fatalf("released %v, want %v (the unfinished unit's and the idle one's)", f.released, want)
	}
}

// TestClaimsIdleLeaseRunsOut: a lease claimed ahead that no worker
// started within a lease duration is no longer renewed.
func TestClaimsIdleLeaseRunsOut(t *testing.T) {
	ctx := context.Background()
	f := newFakeClaims()
	c := newSnapshotClaims(f, "me", 50*time.Millisecond, time.Hour, func(bucketstore.Lease) {})
	us := claimUnits(c, 2, 1_000)
	if _, err := c.take(ctx, 1, us[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.start(us[0], func(error) {}); err != nil {
		t.Fatal(err)
	}
	if got := leaseNames(c.renewable()); len(got) != 2 {
		t.Fatalf("renewable %v, want both", got)
	}
	time.Sleep(60 * time.Millisecond) // past the lease duration
	if got := leaseNames(c.renewable()); !slices.Equal(got, []string{us[0].unit.Lease}) {
		t.Fatalf("renewable after a lease duration: %v, want only the running unit's", got)
	}
	if _, err := c.start(us[1], func(error) {}); !errors.Is(err, bucketstore.ErrLeaseLost) {
		t.Fatalf("start of a unit whose claim ran out: %v", err)
	}
}

// TestClaimAheadBudget: a process claims ahead about one heartbeat of its
// own work, so a short lease is not outlived by the claimed-ahead queues
// the others work through before they take a dead process's units.
func TestClaimAheadBudget(t *testing.T) {
	c := newSnapshotClaims(newFakeClaims(), "me", 3*time.Second, time.Second, func(bucketstore.Lease) {})
	if got, want := c.aheadBudget(), int64(claimAheadRows/10); got != want {
		t.Fatalf("budget before any unit finished, 1 s heartbeat = %d, want %d", got, want)
	}
	c.firstStart, c.doneRows = time.Now().Add(-10*time.Second), 200_000 // 20k rows/s
	if got := c.aheadBudget(); got < 19_000 || got > 20_000 {
		t.Fatalf("budget at 20k rows/s, 1 s heartbeat = %d, want about 20k", got)
	}
	if got := claimLimit(20_000, 0, c.aheadBudget()); got != 1 {
		t.Fatalf("claimLimit of 20k-row units with a 1 s heartbeat at 20k rows/s = %d, want 1 (nothing ahead)", got)
	}
	c.beat = time.Minute
	if got := c.aheadBudget(); got != claimAheadRows {
		t.Fatalf("budget with a 1 min heartbeat = %d, want the cap %d", got, claimAheadRows)
	}
}
