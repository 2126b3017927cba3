package replication

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// compactionLease is the lease of the background compaction: one process
// of all that replicate compacts at a time, so that they do not repeat
// each other's work (compaction would stay correct if they did: every
// rewrite checks the op kind it replaces, under row locks).
const compactionLease = "compact/all"

// compactionMetrics count what background compaction did.
type compactionMetrics struct {
	ops       metric.Int64Counter // by kind: moved, cleared
	runs      metric.Int64Counter
	reclaimed metric.Int64Counter // bytes (CompactStats.Reclaimed)
}

func newCompactionMetrics(m metric.Meter) compactionMetrics {
	ops, _ := m.Int64Counter("syncpipe_compaction_ops_total",
		metric.WithDescription("Ops background compaction rewrote: kind moved (superseded ops turned into MOVEs) or cleared (ops merged into CLEARs and deleted)."))
	runs, _ := m.Int64Counter("syncpipe_compaction_runs_total",
		metric.WithDescription("Background compactions of a group that completed."))
	// Named without _total: the Prometheus exporter appends it after the
	// unit's _bytes.
	reclaimed, _ := m.Int64Counter("syncpipe_compaction_reclaimed_bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of bucket_data rows background compaction dropped (deleted ops, data of ops turned into MOVEs): logical bytes, which PostgreSQL reuses once autovacuum has processed the table."))
	return compactionMetrics{ops: ops, runs: runs, reclaimed: reclaimed}
}

// compactions compacts every serving group once per
// replication.compaction.interval until ctx ends, under compactionLease.
// A failed run is logged and tried again at the next interval: compaction
// only saves space, and what a run did stays valid.
func (r *Replicator) compactions(ctx context.Context) {
	cm := newCompactionMetrics(r.metrics.meter)
	t := time.NewTicker(r.cfg.Replication.Compaction.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.leased(compactionLease, func(ctx context.Context, _ bucketstore.Fence) error {
			return r.compactAll(ctx, cm)
		})(ctx)
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, pipeline.ErrDeferred):
			r.log.Debug("background compaction runs in another process", "err", err)
		default:
			r.log.Warn("background compaction failed; trying again at the next interval", "err", err)
		}
	}
}

// compactAll compacts the serving groups one after the other.
func (r *Replicator) compactAll(ctx context.Context, cm compactionMetrics) error {
	groups, err := r.catalog.Groups(ctx)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if !g.Serving() {
			continue
		}
		began := time.Now()
		st, err := r.maint.Compact(ctx, g.ID, bucketstore.CompactOptions{BatchOps: r.cfg.Replication.Compaction.BatchOps,
			MaxBusy: r.cfg.Replication.Compaction.MaxBusy,
			Progress: func(_ string, st bucketstore.CompactStats) {
				cm.ops.Add(ctx, st.Moved, metric.WithAttributes(attribute.String("kind", "moved")))
				cm.ops.Add(ctx, st.Cleared, metric.WithAttributes(attribute.String("kind", "cleared")))
				cm.reclaimed.Add(ctx, st.Reclaimed)
			}})
		if err != nil {
			return err
		}
		cm.runs.Add(ctx, 1)
		r.log.Info("compacted bucket storage", "group", g.ID, "up_to_op", st.UpTo, "buckets", st.Buckets,
			"moved", st.Moved, "cleared", st.Cleared, "reclaimed_bytes", st.Reclaimed, "elapsed", time.Since(began).Round(time.Millisecond))
	}
	return nil
}
