package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// Work units are leased through storage (see doc.go, "Several
// processes"): a unit runs in the process that holds its lease, renews it
// every replication.lease.heartbeat and gives it up when it ends, and
// every storage write it makes is fenced with the lease's token.

// snapshotLease names the lease of a snapshot range unit.
func snapshotLease(t *table, rangeNo int) string {
	return fmt.Sprintf("snapshot/%s/%d", t.stored.ID, rangeNo)
}

// streamLease names the lease of a group's stream unit.
func streamLease(g *group) string { return fmt.Sprintf("stream/%d", g.g.ID) }

// leased wraps a unit's work in its lease: run gets a ctx that ends when
// the lease is lost and the fence its writes carry. A unit whose lease
// another process holds, or lost while running, is deferred — re-queued
// here, to be claimed again after a heartbeat: by then the other process
// may have finished it, which the unit then sees from storage.
func (r *Replicator) leased(name string, run func(ctx context.Context, f bucketstore.Fence) error) func(context.Context) error {
	return func(ctx context.Context) error {
		lc := r.cfg.Replication.Lease
		l, ok, err := r.leases.AcquireLease(ctx, name, r.owner, lc.Duration)
		if err != nil {
			return r.claimFailed(name, err)
		}
		if !ok {
			return r.heldElsewhere(name)
		}
		r.metrics.leaseAcquired(ctx, name, l.Takeover)
		uctx, cancel := context.WithCancelCause(ctx)
		beat := make(chan struct{})
		go func() {
			defer close(beat)
			r.heartbeat(uctx, l, cancel)
		}()
		defer func() {
			cancel(nil)
			<-beat
			// Given up at once, also on shutdown: another process takes
			// the unit without waiting for the lease to run out.
			rctx, done := closeCtx()
			defer done()
			if err := r.leases.ReleaseLease(rctx, l); err != nil {
				r.log.Warn("cannot release a lease; it runs out by itself", "unit", name, "err", err)
			}
		}()
		return r.deferLost(ctx, name, withLoss(ctx, uctx, run(uctx, bucketstore.FenceOf(l))))
	}
}

// withLoss is a leased run's error: the loss of its lease (uctx's cause,
// while ctx goes on) stands for whatever the run saw of it.
func withLoss(ctx, uctx context.Context, err error) error {
	if lost := context.Cause(uctx); ctx.Err() == nil && errors.Is(lost, bucketstore.ErrLeaseLost) {
		return lost
	}
	return err
}

// deferLost defers a unit that ended because it lost its lease: it is
// claimed again after a heartbeat, when another process may have done it.
func (r *Replicator) deferLost(ctx context.Context, name string, err error) error {
	if ctx.Err() == nil && errors.Is(err, bucketstore.ErrLeaseLost) {
		r.log.Warn("lost a work unit's lease; another process continues it", "unit", name, "err", err)
		return pipeline.Defer(jitter(r.cfg.Replication.Lease.Heartbeat), err)
	}
	return err
}

// claimFailed defers a unit whose lease could not be claimed (storage
// unreachable, a lease row locked too long): it is tried again later.
func (r *Replicator) claimFailed(name string, err error) error {
	r.log.Warn("cannot claim a work unit; trying again later", "unit", name, "err", err)
	return pipeline.Defer(jitter(r.cfg.Replication.Lease.Heartbeat), err)
}

// heldElsewhere defers a unit whose lease another process holds: it is
// claimed again after a heartbeat, when it may be finished.
func (r *Replicator) heldElsewhere(name string) error {
	return pipeline.Defer(jitter(r.cfg.Replication.Lease.Heartbeat), fmt.Errorf("work unit %s is held by another process", name))
}

// heartbeat renews l every lease heartbeat until ctx ends. It cancels ctx
// with ErrLeaseLost when the lease was taken over, or when it could not
// be renewed for a whole lease duration (storage unreachable from here:
// another process may have taken the unit since).
func (r *Replicator) heartbeat(ctx context.Context, l bucketstore.Lease, cancel context.CancelCauseFunc) {
	lc := r.cfg.Replication.Lease
	t := time.NewTicker(lc.Heartbeat)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h := r.hooks.beforeRenew; h != nil {
			h(ctx, l.Name)
		}
		rctx, done := context.WithTimeout(ctx, lc.Heartbeat)
		err := r.leases.RenewLease(rctx, l, lc.Duration)
		done()
		switch {
		case err == nil:
			renewed = time.Now()
		case ctx.Err() != nil:
			return
		case errors.Is(err, bucketstore.ErrLeaseLost):
			cancel(err)
			return
		case time.Since(renewed) >= lc.Duration:
			cancel(fmt.Errorf("lease %s not renewed for %s (last error: %v): %w", l.Name, lc.Duration, err, bucketstore.ErrLeaseLost))
			return
		default:
			r.log.Warn("cannot renew a lease; retrying at the next heartbeat", "unit", l.Name, "err", err)
		}
	}
}
