package replication

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// Snapshot units are claimed in batches (see bucketstore.ClaimSnapshotUnits).
// Every process queues every range of a group; when a worker starts one
// whose state it does not know, one statement reads the state of that unit
// and of the next ones queued here, and claims the unit together with a
// few that follow it — so many that the units it holds claimed ahead make
// up about one heartbeat of its work at most (aheadBudget), so it never
// sits on more than a few seconds of others' work: small units are
// claimed several at a time, a large range alone. Units
// found done or held elsewhere are skipped later without a statement (a
// unit held elsewhere is asked about again after half a heartbeat, and
// only by a process that holds nothing claimed ahead). One
// statement per heartbeat renews every snapshot lease the process holds
// (keep), and a unit that finishes its range does not release its lease:
// a done range is never claimed again. A process that finds nothing free
// takes a unit another one claimed ahead and has not started (a steal),
// so the last units of a snapshot do not wait behind one process.
const (
	// claimCandidates is how many units one claim looks at.
	claimCandidates = 128
	// claimAheadRows bounds the estimated rows of the units a process
	// holds claimed ahead (not started), beyond the one it starts. Within
	// it, a process claims ahead about one heartbeat of its own work
	// (aheadBudget): a dead process's units wait behind the claimed-ahead
	// queues of the others, and a takeover must fit in a lease duration
	// and a few seconds, however short the lease.
	claimAheadRows = 320_000
	// claimAheadBeat is the heartbeat at which claimAheadRows is claimed
	// ahead before this process has finished a unit (its rate unknown);
	// a shorter heartbeat claims proportionally less.
	claimAheadBeat = 10 * time.Second
	// maxClaimAhead bounds their number.
	maxClaimAhead = 16
)

// claimState is what this process knows of a snapshot unit's lease.
type claimState int

const (
	claimUnknown   claimState = iota // not read, or no longer known
	claimHeld                        // this process holds the lease
	claimDone                        // the range is finished
	claimElsewhere                   // a live other process held it at seen
)

// unitClaim is one snapshot unit of a group, in the order it was queued.
type unitClaim struct {
	unit  bucketstore.SnapshotUnit
	at    int   // its place in its group's queue order
	rows  int64 // estimated rows of the range
	state claimState
	// tableDone: when state is claimDone, the claim also found the table
	// marked snapshot done (see rangeDone).
	tableDone bool
	seen      time.Time         // when state was learnt
	lease     bucketstore.Lease // while claimHeld
	// cancel ends the unit's run when its lease is lost; nil while the
	// unit is claimed but not started.
	cancel context.CancelCauseFunc
}

// claimStore is what claims need of storage.
type claimStore interface {
	ClaimSnapshotUnits(ctx context.Context, owner string, ttl time.Duration, units []bucketstore.SnapshotUnit, limit int, steal bool) ([]bucketstore.UnitClaim, error)
	RenewLeases(ctx context.Context, owner string, held []bucketstore.Lease, ttl time.Duration) (lost []string, err error)
	ReleaseLeases(ctx context.Context, owner string, held []bucketstore.Lease) error
}

// snapshotClaims holds this process's knowledge of its snapshot units'
// leases.
type snapshotClaims struct {
	store     claimStore
	owner     string
	ttl, beat time.Duration
	onClaim   func(l bucketstore.Lease) // counts an acquisition (metrics)

	claimMu sync.Mutex // one claim statement at a time: each serves many units
	mu      sync.Mutex
	units   map[int][]*unitClaim // per group id, in queue order
	// The estimated rows of the units finished here and the time since
	// the first one started: this process's snapshot rate (aheadBudget).
	firstStart time.Time
	doneRows   int64
}

func newSnapshotClaims(store claimStore, owner string, ttl, beat time.Duration, onClaim func(bucketstore.Lease)) *snapshotClaims {
	return &snapshotClaims{store: store, owner: owner, ttl: ttl, beat: beat, onClaim: onClaim, units: map[int][]*unitClaim{}}
}

// add records the units queued for a group, in queue order, in place of
// any recorded before for the group.
func (c *snapshotClaims) add(group int, units []*unitClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, u := range units {
		u.at = i
	}
	c.units[group] = units
}

// take tells whether u is done, held elsewhere or now held here, claiming
// it (and the units after it) with one statement when its state is not
// known or has gone stale.
func (c *snapshotClaims) take(ctx context.Context, group int, u *unitClaim) (claimState, error) {
	c.claimMu.Lock()
	defer c.claimMu.Unlock()
	batch, fresh := c.candidates(group, u)
	if fresh {
		return c.state(u), nil
	}
	units := make([]bucketstore.SnapshotUnit, len(batch))
	for i, b := range batch {
		units[i] = b.unit
	}
	answers, err := c.store.ClaimSnapshotUnits(ctx, c.owner, c.ttl, units, claimLimit(u.rows, c.idleRows(), c.aheadBudget()), false)
	if err != nil {
		return claimUnknown, err
	}
	if len(answers) > 0 && answers[0].Idle && !slices.ContainsFunc(answers, func(a bucketstore.UnitClaim) bool { return a.Claimed }) {
		// Nothing free here, and u is only claimed ahead by another
		// process: take it rather than wait for that process to get to it.
		stolen, err := c.store.ClaimSnapshotUnits(ctx, c.owner, c.ttl, units[:1], 1, true)
		if err != nil {
			return claimUnknown, err
		}
		answers[0] = stolen[0]
	}
	c.apply(batch, answers)
	return c.state(u), nil
}

// apply records what a claim found for batch.
func (c *snapshotClaims) apply(batch []*unitClaim, answers []bucketstore.UnitClaim) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range answers {
		b := batch[i]
		switch {
		case a.Claimed:
			b.state, b.lease = claimHeld, a.Lease
			c.onClaim(a.Lease)
		case a.Done:
			b.state, b.tableDone = claimDone, a.TableDone
		case a.Elsewhere:
			b.state = claimElsewhere
		default:
			b.state = claimUnknown
		}
		b.seen = now
	}
}

// state is u's state.
func (c *snapshotClaims) state(u *unitClaim) claimState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return u.state
}

// tableMarked says whether the claim that found u done also found its
// table marked snapshot done.
func (c *snapshotClaims) tableMarked(u *unitClaim) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return u.state == claimDone && u.tableDone
}

// candidates is u followed by the group's units queued after it whose
// state is not known; fresh is set (and only u returned) when u's own
// state is known and can be used without asking storage.
func (c *snapshotClaims) candidates(group int, u *unitClaim) (batch []*unitClaim, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A unit held elsewhere is asked about again only by a process with
	// nothing of its own claimed ahead: one that has, works through that
	// first (at most about a heartbeat of work: aheadBudget), and a
	// statement now would only find the other process still at it.
	if c.known(u) || u.state == claimElsewhere && c.idleRowsLocked() > 0 {
		return []*unitClaim{u}, true
	}
	batch = []*unitClaim{u}
	all := c.units[group]
	at := u.at
	for i := 1; i < len(all) && len(batch) < claimCandidates; i++ {
		if o := all[(at+i)%len(all)]; o.unit.Lease != u.unit.Lease && !c.known(o) && o.cancel == nil {
			batch = append(batch, o)
		}
	}
	return batch, false
}

// known says whether u's state needs no statement: held here, done, or
// seen held elsewhere less than half a heartbeat ago (a deferred unit
// comes back after about a heartbeat, and then asks again).
func (c *snapshotClaims) known(u *unitClaim) bool {
	switch u.state {
	case claimHeld, claimDone:
		return true
	case claimElsewhere:
		return time.Since(u.seen) < c.beat/2
	}
	return false
}

// claimLimit is how many units a claim starting with a unit of rows
// estimated rows takes, while idle estimated rows are claimed ahead here
// already: that unit, and as many more as the rest of budget holds (none
// when the estimate is unknown: the table was never analysed).
func claimLimit(rows, idle, budget int64) int {
	if rows <= 0 {
		return 1
	}
	return 1 + int(min(max(budget-idle, 0)/rows, maxClaimAhead))
}

// aheadBudget is how many estimated rows this process may hold claimed
// ahead: what it finishes in one heartbeat at its rate so far, or, before
// it has finished a unit, claimAheadRows scaled to the heartbeat; never
// more than claimAheadRows.
func (c *snapshotClaims) aheadBudget() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doneRows == 0 {
		return int64(float64(claimAheadRows) * min(c.beat.Seconds()/claimAheadBeat.Seconds(), 1))
	}
	rate := float64(c.doneRows) / max(time.Since(c.firstStart).Seconds(), 0.001)
	return min(int64(rate*c.beat.Seconds()), claimAheadRows)
}

// idleRows sums the estimated rows of the units claimed ahead here.
func (c *snapshotClaims) idleRows() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.idleRowsLocked()
}

// idleRowsLocked is idleRows with c.mu held.
func (c *snapshotClaims) idleRowsLocked() int64 {
	var n int64
	c.eachHeldLocked(func(u *unitClaim) {
		if u.cancel == nil {
			n += max(u.rows, 0)
		}
	})
	return n
}

// eachHeldLocked calls f for every unit of every group whose lease is
// held here (c.mu held).
func (c *snapshotClaims) eachHeldLocked(f func(u *unitClaim)) {
	for _, us := range c.units {
		for _, u := range us {
			if u.state == claimHeld {
				f(u)
			}
		}
	}
}

// start marks u, held, as running: cancel ends it when the lease is lost.
// It fails when the lease was lost since the claim.
func (c *snapshotClaims) start(u *unitClaim, cancel context.CancelCauseFunc) (bucketstore.Lease, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u.state != claimHeld {
		return bucketstore.Lease{}, fmt.Errorf("the lease of %s was lost before its unit started: %w", u.unit.Lease, bucketstore.ErrLeaseLost)
	}
	u.cancel = cancel
	if c.firstStart.IsZero() {
		c.firstStart = time.Now()
	}
	return u.lease, nil
}

// finish ends u's run. A range that is done keeps its lease until it runs
// out (no one claims a done range); any other is released at once, so
// another process can go on with it.
func (c *snapshotClaims) finish(ctx context.Context, u *unitClaim, done bool) error {
	c.mu.Lock()
	held := u.state == claimHeld
	l := u.lease
	u.cancel = nil
	u.state = claimUnknown
	if done {
		u.state = claimDone
		c.doneRows += max(u.rows, 0)
	}
	u.seen = time.Now()
	c.mu.Unlock()
	if done || !held {
		return nil
	}
	return c.store.ReleaseLeases(ctx, c.owner, []bucketstore.Lease{l})
}

// keep renews the held snapshot leases every heartbeat until ctx ends,
// then releases those claimed but not started. A lease that could not be
// renewed is lost: its running unit is canceled with ErrLeaseLost. A
// lease claimed ahead and not started within a lease duration is left to
// run out, so units queued here behind long ones go to another process.
func (c *snapshotClaims) keep(ctx context.Context) {
	t := time.NewTicker(c.beat)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			rctx, done := closeCtx()
			defer done()
			_ = c.store.ReleaseLeases(rctx, c.owner, c.idle()) // they run out by themselves otherwise
			return
		case <-t.C:
		}
		held := c.renewable()
		if len(held) == 0 {
			renewed = time.Now()
			continue
		}
		rctx, done := context.WithTimeout(ctx, c.beat)
		lost, err := c.store.RenewLeases(rctx, c.owner, held, c.ttl)
		done()
		switch {
		case err == nil:
			renewed = time.Now()
			c.lose(lost, bucketstore.ErrLeaseLost)
		case ctx.Err() != nil:
		case time.Since(renewed) >= c.ttl:
			cause := fmt.Errorf("snapshot leases not renewed for %s (last error: %v): %w", c.ttl, err, bucketstore.ErrLeaseLost)
			c.lose(leaseNames(held), cause)
		}
	}
}

// renewable lists the held leases to renew: the running units', and the
// claimed-ahead ones not older than a lease duration.
func (c *snapshotClaims) renewable() []bucketstore.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	var held []bucketstore.Lease
	c.eachHeldLocked(func(u *unitClaim) {
		if u.cancel != nil || time.Since(u.seen) < c.ttl {
			held = append(held, u.lease)
		} else {
			u.state = claimUnknown // left to run out
		}
	})
	return held
}

// idle lists the leases claimed ahead and not started, and forgets them.
func (c *snapshotClaims) idle() []bucketstore.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	var held []bucketstore.Lease
	c.eachHeldLocked(func(u *unitClaim) {
		if u.cancel == nil {
			held = append(held, u.lease)
			u.state = claimUnknown
		}
	})
	return held
}

// lose forgets the leases named: a running unit is canceled with cause.
func (c *snapshotClaims) lose(names []string, cause error) {
	if len(names) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eachHeldLocked(func(u *unitClaim) {
		if !slices.Contains(names, u.unit.Lease) {
			return
		}
		u.state = claimUnknown
		if u.cancel != nil {
			u.cancel(cause)
		}
	})
}

func leaseNames(ls []bucketstore.Lease) []string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Name
	}
	return names
}
