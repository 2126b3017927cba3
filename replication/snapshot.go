package replication

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages"
)

// submitSnapshots plans the key ranges of every table whose snapshot is not
// done and submits a unit per unfinished range; a group with nothing left
// to snapshot goes straight to streaming.
func (r *Replicator) submitSnapshots(ctx context.Context, conn *pgx.Conn, g *group) error {
	var ids []string
	for _, t := range g.tables {
		if !t.stored.SnapshotDone {
			ids = append(ids, t.stored.ID)
		}
	}
	// Another process (or this one, before a restart) may have planned
	// the tables already: their plans are read at once, not made again.
	stored, err := r.sourceTables.StoredRanges(ctx, ids)
	if err != nil {
		return err
	}
	var units []pipeline.Unit
	var claims []*unitClaim
	for _, t := range g.tables {
		if t.stored.SnapshotDone {
			continue
		}
		states := stored[t.stored.ID]
		if len(states) == 0 {
			if states, err = r.planRanges(ctx, conn, t); err != nil {
				return err
			}
		}
		r.progress.track(t.info.QualifiedName(), t.info.EstimatedRows)
		for _, st := range states {
			r.progress.seed(t.info.QualifiedName(), st.No, st.RowsDone)
			if st.Done {
				continue
			}
			t.remaining++
			uc := &unitClaim{rows: t.info.EstimatedRows / int64(len(states)),
				unit: bucketstore.SnapshotUnit{Lease: snapshotLease(t, st.No), TableID: t.stored.ID, RangeNo: st.No}}
			claims = append(claims, uc)
			units = append(units, r.snapshotUnit(g, t, st, uc))
		}
		if t.remaining == 0 { // every range finished before a crash
			if err := r.tableDone(ctx, g, t); err != nil {
				return err
			}
		}
	}
	g.remaining = len(units)
	if len(units) == 0 {
		if err := r.markSnapshotDone(ctx, g); err != nil {
			return err
		}
		return r.snapshotDone(g)
	}
	if r.opts.Role == "replication:streaming" {
		r.log.Info("the group's snapshot is not done and this process only streams: waiting for a replication:snapshot process to do it",
			"group", g.g.ID, "ranges", len(units))
		r.background(func(ctx context.Context) { r.awaitSnapshot(ctx, g) })
		return nil
	}
	r.claims.add(g.g.ID, claims)
	for _, u := range units {
		if err := r.sched.Submit(u); err != nil {
			return err
		}
	}
	return nil
}

// planRanges splits a table into key ranges and stores the plan; a plan
// another process stored first wins.
func (r *Replicator) planRanges(ctx context.Context, conn *pgx.Conn, t *table) ([]bucketstore.RangeState, error) {
	snap := r.cfg.Replication.Snapshot
	ranges, err := postgres.SplitRanges(ctx, conn, t.info, snap.MaxRangesPerTable, int64(snap.SplitRows))
	if err != nil {
		return nil, err
	}
	plan := make([]bucketstore.KeyRange, len(ranges))
	for i, kr := range ranges {
		plan[i] = bucketstore.KeyRange{Lower: kr.Lower, Upper: kr.Upper}
	}
	return r.sourceTables.PlanRanges(ctx, t.stored.ID, plan)
}

func (r *Replicator) snapshotUnit(g *group, t *table, st bucketstore.RangeState, uc *unitClaim) pipeline.Unit {
	key := fmt.Sprintf("group %d snapshot %s range %d", g.g.ID, t.info.QualifiedName(), st.No)
	run := func(ctx context.Context, f bucketstore.Fence) error {
		var done bool
		err := r.retry(ctx, g.g.ID, key, "snapshot", func(ctx context.Context) error {
			var err error
			done, err = r.snapshotRange(ctx, g, t, st, f)
			return err
		})
		if err != nil || !done {
			return err
		}
		r.recovered(ctx, g.g.ID)
		return r.rangeDone(ctx, g, t, key, false)
	}
	return pipeline.Unit{
		Key:      key,
		Kind:     "snapshot",
		Priority: g.prio,
		Run: func(ctx context.Context) error {
			// Every process queues every range: one that another process
			// finished, or works on, is skipped (see claims.go).
			state, err := r.claims.take(ctx, g.g.ID, uc)
			switch {
			case err != nil:
				return r.claimFailed(uc.unit.Lease, err)
			case state == claimDone:
				return r.rangeDone(ctx, g, t, key, r.claims.tableMarked(uc))
			case state != claimHeld:
				return r.heldElsewhere(uc.unit.Lease)
			}
			return r.runClaimed(ctx, uc, run)
		},
	}
}

// runClaimed runs a claimed snapshot unit under its lease: run's ctx ends
// when the lease is lost (claims.keep), and the lease is released when
// run ends without finishing the range.
func (r *Replicator) runClaimed(ctx context.Context, uc *unitClaim, run func(ctx context.Context, f bucketstore.Fence) error) error {
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l, err := r.claims.start(uc, cancel)
	if err == nil {
		err = withLoss(ctx, uctx, run(uctx, bucketstore.FenceOf(l)))
	}
	rctx, done := closeCtx()
	defer done()
	if rerr := r.claims.finish(rctx, uc, err == nil); rerr != nil {
		r.log.Warn("cannot release a lease; it runs out by itself", "unit", uc.unit.Lease, "err", rerr)
	}
	return r.deferLost(ctx, uc.unit.Lease, err)
}

// snapshotRange runs the snapshot pipeline of one key range from its last
// committed chunk: read → the shared chain (eval → build → flush_writers
// writers → ordered progress commit), every write fenced with f. It reports whether the range
// is finished (false after a yield); a range another process finished is
// finished at once.
func (r *Replicator) snapshotRange(ctx context.Context, g *group, t *table, st bucketstore.RangeState, f bucketstore.Fence) (bool, error) {
	// The attempt's writes go through only on the storage run its
	// progress comes from (see bucketstore.ErrStorageRestarted).
	f.Epoch = r.fences.Epoch()
	sink := r.sink(g, f)
	name := t.info.QualifiedName()
	rangeNo := st.No
	// Progress moves on as chunks commit (and across yields), so it is read
	// again here; the range bounds are fixed by the stored plan.
	pos, _, err := sink.Resume(ctx, name, rangeNo)
	if err != nil {
		return false, err
	}
	if pos.Done {
		return true, nil
	}
	kr := postgres.KeyRange{Lower: st.Lower, Upper: st.Upper}
	conn, err := r.connectSource(ctx)
	if err != nil {
		return false, err
	}
	defer closeConn(conn)

	tune := r.pl.Stages
	reader := postgres.NewSnapshotReader(conn, t.info, kr, postgres.SnapshotOptions{
		ChunkRows: tune.ChunkRows, After: pos.LastKey, SocketTimeout: r.cfg.Source.SnapshotSocketTimeout})
	// One batch buffered between stages: a snapshot unit's memory is its
	// batches in flight (megabytes per chunk), times the units running.
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "snapshot " + name,
		Labels: []pipeline.Label{{Key: "table", Value: name}, {Key: "range", Value: fmt.Sprint(rangeNo)}},
		Tracer: r.opts.Tracer, Depth: 1})
	src := &rangeSource{reader: reader, spec: t.spec, table: name, rangeNo: rangeNo, rows: pos.RowsDone}
	src.yield = r.snapshotYield(g)
	read := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[stages.RowChange, sinks.Position](src))
	workers := tune.EvalWorkers
	if workers <= 0 {
		// The cores shared by the units running at once: more eval workers
		// than cores only hold more batches in memory.
		workers = max(1, runtime.GOMAXPROCS(0)/max(r.cfg.Replication.WorkersPerProcess, 1))
	}
	err = stages.Chain(ctx, read, sink, stages.ChainConfig{EvalWorkers: workers, FlushWriters: tune.FlushWriters,
		OnRowError: r.rowError, OnCommit: func(_ context.Context, b sinks.Batch, _ bool) error {
			r.progress.committed(b.Progress)
			return nil
		}})
	if err != nil {
		return false, err
	}
	start := time.Now()
	err = p.Run(ctx)
	if errors.Is(err, pipeline.ErrYielded) {
		return false, err
	}
	if err != nil {
		return false, err
	}
	r.log.Info("snapshot range done", "group", g.g.ID, "table", name, "range", rangeNo, "rows", src.rows,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return true, nil
}

// rowError logs a row whose sync rules failed for some query: the row is
// written for the queries that succeeded.
func (r *Replicator) rowError(t *model.Table, err error) {
	r.log.Warn("sync rules failed on a row", "table", t.String(), "err", err)
}

// rangeDone counts a finished range; the last range of a table marks the
// table done, the last of the group starts its stream. The counts go down
// once, and the marks that follow are retried like the range itself
// (unit names the range): a source or storage blip at a table's end must
// back off, not end the run with the range counted and its table never
// marked.
func (r *Replicator) rangeDone(ctx context.Context, g *group, t *table, unit string, marked bool) error {
	t.mu.Lock()
	t.remaining--
	tableDone := t.remaining == 0
	t.mu.Unlock()
	switch {
	case tableDone && marked:
		// Another process finished the table and marked it: marking it
		// again would only cost a source connection and a statement, for
		// every table, in every process.
		r.progress.tableDone(t.info.QualifiedName())
	case tableDone:
		err := r.retry(ctx, g.g.ID, unit, "snapshot", func(ctx context.Context) error { return r.tableDone(ctx, g, t) })
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
	g.mu.Lock()
	g.remaining--
	groupDone := g.remaining == 0
	g.mu.Unlock()
	if !groupDone {
		return nil
	}
	if err := r.retry(ctx, g.g.ID, unit, "snapshot", func(ctx context.Context) error { return r.markSnapshotDone(ctx, g) }); err != nil || ctx.Err() != nil {
		return err
	}
	return r.snapshotDone(g)
}

// tableDone records the source position after the table's last read: no
// checkpoint may be published before the stream passes it.
func (r *Replicator) tableDone(ctx context.Context, g *group, t *table) error {
	lsn, err := r.currentLSN(ctx)
	if err != nil {
		return err
	}
	if err := r.sourceTables.MarkTableSnapshotDone(ctx, t.stored.ID, lsn); err != nil {
		return err
	}
	r.progress.tableDone(t.info.QualifiedName())
	r.log.Info("table snapshot done", "group", g.g.ID, "table", t.info.QualifiedName(), "lsn", lsn.String())
	return nil
}

// markSnapshotDone records the source position after the group's last
// table: the stream starts there.
func (r *Replicator) markSnapshotDone(ctx context.Context, g *group) error {
	lsn, err := r.currentLSN(ctx)
	if err != nil {
		return err
	}
	if err := r.sourceTables.MarkSnapshotDone(ctx, g.g.ID, lsn); err != nil {
		return err
	}
	r.log.Info("snapshot done", "group", g.g.ID, "lsn", lsn.String())
	return nil
}

// snapshotDone starts the stream of a group whose snapshot is marked done.
func (r *Replicator) snapshotDone(g *group) error {
	if r.opts.OnSnapshotDone != nil {
		r.opts.OnSnapshotDone(g.g.ID)
	}
	return r.submitStream(g)
}

// awaitSnapshot polls storage, every lease heartbeat, until another
// process finished the group's snapshot, then queues the group's stream.
func (r *Replicator) awaitSnapshot(ctx context.Context, g *group) {
	t := time.NewTicker(r.cfg.Replication.Lease.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sg, err := r.catalog.Group(ctx, g.g.ID)
		if err != nil {
			r.log.Warn("cannot read the group's snapshot state; trying again", "group", g.g.ID, "err", err)
			continue
		}
		if sg.SnapshotDone {
			r.log.Info("the group's snapshot was finished by another process; streaming", "group", g.g.ID)
			if err := r.submitStream(g); err != nil && ctx.Err() == nil {
				r.log.Error("cannot queue the group's stream", "group", g.g.ID, "err", err)
			}
			return
		}
	}
}

// currentLSN is the source's WAL insert position (see currentLSN).
func (r *Replicator) currentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	conn, err := r.connectSource(ctx)
	if err != nil {
		return 0, err
	}
	defer closeConn(conn)
	return currentLSN(ctx, conn)
}

// A reprocessing snapshot gives way to the streams of ACTIVE groups
// (SPEC §5: active stream > reprocessing snapshots). A running stream
// holds its worker, but it shares the cores and the storage with the
// snapshot, which alone can use them all; so before it reads a chunk, and
// again before it writes one, the snapshot waits while an active stream in
// this process has source transactions older than yieldLag not yet in a
// checkpoint — at most maxYield each time, so that a stream that cannot
// keep up with its source even alone does not stop the reprocessing for
// good. (Snapshot workers in other processes run on cores of their own;
// they share only storage.)
const (
	yieldLag = 250 * time.Millisecond
	maxYield = 2 * time.Second
)

// snapshotYield is what g's snapshot runs before each chunk it reads and
// writes: yieldToActiveStreams for a group below the active one's
// priority, nothing (nil) for the active group's own.
func (r *Replicator) snapshotYield(g *group) func(context.Context) error {
	if g.prio > prioActiveSnapshot {
		return r.yieldToActiveStreams
	}
	return nil
}

// yieldToActiveStreams waits while an active group's stream here lags.
func (r *Replicator) yieldToActiveStreams(ctx context.Context) error {
	deadline := time.Now().Add(maxYield)
	for time.Now().Before(deadline) && r.activeStreamLag() > yieldLag {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// activeStreamLag is the largest lag of the ACTIVE groups' streams that
// run in this process.
func (r *Replicator) activeStreamLag() time.Duration {
	lags := r.metrics.streamLags(time.Now())
	var worst time.Duration
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, lag := range lags {
		if g := r.groups[id]; g != nil && g.state() == bucketstore.StateActive {
			worst = max(worst, lag)
		}
	}
	return worst
}
