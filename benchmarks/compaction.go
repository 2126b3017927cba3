package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// CompactionOptions configures the P8 compaction scenario.
type CompactionOptions struct {
	// Rows todos in one list, each updated Updates times.
	Rows, Updates int
	Runs          int // drains before and after, median reported
	Log           io.Writer
	// NewDatabase, if set, creates an empty database and returns its URI;
	// nil starts a throwaway cluster.
	NewDatabase func(ctx context.Context, name string) (string, error)
}

// RunCompaction measures what compaction buys (issue 19's P8 row): one
// list's todos are each updated Updates times, every round streamed by
// syncpipe and published in a checkpoint of its own (so every update is
// an op), then a new client drains the list's buckets before and after
// `Compactor.Compact`, and the bucket data's size (after VACUUM FULL, so that
// both sides count live bytes) and op count are compared.
func RunCompaction(ctx context.Context, opt CompactionOptions) (Result, error) {
	opt.Runs = max(opt.Runs, 1)
	res := Result{Scenario: "compaction", Date: time.Now(),
		Params: fmt.Sprintf("P8: %d todos in one list, each updated %d times (every round replicated by syncpipe and published in a checkpoint "+
			"of its own); a new client entitled to every bucket drains them before and after compaction (median of %d runs, NDJSON, "+
			"in-process sync API over loopback HTTP); bucket_data size after VACUUM FULL", opt.Rows, opt.Updates, opt.Runs)}
	newDB := opt.NewDatabase
	if newDB == nil {
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return res, err
		}
		defer cluster.Stop()
		newDB = func(ctx context.Context, name string) (string, error) {
			return cluster.URI(name), cluster.CreateDatabase(ctx, name)
		}
	}
	d, err := prepareUpdated(ctx, newDB, opt)
	if err != nil {
		return res, err
	}
	defer d.store.Close()
	var rows rowSet
	before := fmt.Sprintf("%s todos × %d updates, fresh-client drain before compaction", size(opt.Rows), opt.Updates)
	after := fmt.Sprintf("%s todos × %d updates, fresh-client drain after compaction", size(opt.Rows), opt.Updates)
	opsBefore, bytesBefore, err := bucketDataSize(ctx, d.store)
	if err != nil {
		return res, err
	}
	if err := drainRuns(ctx, d, opsBefore, opt, before, &rows); err != nil {
		return res, err
	}
	group, err := activeGroup(ctx, d.store.Reader())
	if err != nil {
		return res, err
	}
	began := time.Now()
	st, err := d.store.Compactor().Compact(ctx, group, bucketstore.CompactOptions{})
	took := time.Since(began)
	if err != nil {
		return res, err
	}
	logf(opt.Log, "compacted in %s: %+v", took.Round(time.Millisecond), st)
	opsAfter, bytesAfter, err := bucketDataSize(ctx, d.store)
	if err != nil {
		return res, err
	}
	if err := drainRuns(ctx, d, opsAfter, opt, after, &rows); err != nil {
		return res, err
	}
	rows.byName[after].Baseline = before
	res.Rows = rows.list()
	res.Notes = append(res.Notes, fmt.Sprintf("Compaction took %s (%d buckets up to op %d: %d ops moved, %d merged into CLEARs): "+
		"bucket_data %d ops, %.1f MiB before; %d ops, %.1f MiB after.", took.Round(time.Millisecond), st.Buckets, st.UpTo,
		st.Moved, st.Cleared, opsBefore, float64(bytesBefore)/(1<<20), opsAfter, float64(bytesAfter)/(1<<20)))
	// Each list's todos are in its by_list bucket, the list in global: one
	// PUT per row, and at most one CLEAR per bucket.
	limit := int64(opt.Rows + 1 + 2)
	res.Bars = []Bar{{ID: "P8", Measure: "ops a new client downloads after compaction",
		Bar:   fmt.Sprintf("≤ one PUT per row + one CLEAR per bucket (%d rows in 2 buckets: ≤ %d)", opt.Rows+1, limit),
		Value: fmt.Sprintf("%d ops (%d before)", opsAfter, opsBefore), Met: opsAfter <= limit}}
	return res, nil
}

// drainRuns drains d's buckets opt.Runs times with a new sync API server
// (a fresh checksum cache: compaction changes the counts), expecting ops.
func drainRuns(ctx context.Context, d *drainData, ops int64, opt CompactionOptions, name string, rows *rowSet) error {
	d.ops = ops
	ds, err := startDrainServer(ctx, nil, d, bucketstore.ReadLateral)
	if err != nil {
		return err
	}
	defer ds.close()
	for run := range opt.Runs {
		st, err := ds.drainOnce(ctx, 0, wireNDJSON)
		if err != nil {
			return fmt.Errorf("drain %s: %w", name, err)
		}
		if st.ops != ops {
			return fmt.Errorf("drain %s: received %d ops, storage holds %d", name, st.ops, ops)
		}
		rows.add(name, "", Sample{Duration: st.total, Rows: st.ops, Ops: st.ops, Bytes: st.bytes})
		logf(opt.Log, "run %d: %s: %s, %d ops, %.1f MiB", run+1, name, st.total.Round(time.Millisecond), st.ops, float64(st.bytes)/(1<<20))
	}
	return nil
}

// bucketDataSize is the op count and the size of the ops tables (with
// their indexes; storage version 2's partitions of bucket_data2 too) after
// VACUUM FULL.
func bucketDataSize(ctx context.Context, store *bucketstore.Store) (ops, bytes int64, err error) {
	if _, err := store.Pool().Exec(ctx, "VACUUM (FULL, ANALYZE) bucket_data, bucket_data2"); err != nil {
		return 0, 0, fmt.Errorf("vacuum bucket_data: %w", err)
	}
	err = store.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM bucket_data) + (SELECT count(*) FROM bucket_data2),
		pg_total_relation_size('bucket_data') + coalesce((SELECT sum(pg_total_relation_size(inhrelid))::bigint
		FROM pg_inherits WHERE inhparent = 'bucket_data2'::regclass), 0)`).Scan(&ops, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("measure bucket_data: %w", err)
	}
	return ops, bytes, nil
}

// activeCheckpointer reads the ACTIVE group's checkpoint:
// *bucketstore.Reader.
type activeCheckpointer interface {
	ActiveCheckpoint(ctx context.Context) (bucketstore.Checkpoint, bucketstore.Group, bool, error)
}

// activeGroup is the id of the group whose checkpoint clients are served.
func activeGroup(ctx context.Context, store activeCheckpointer) (int, error) {
	cp, _, ok, err := store.ActiveCheckpoint(ctx)
	if err != nil || !ok {
		return 0, fmt.Errorf("no active group (%v)", err)
	}
	return cp.GroupID, nil
}

// prepareUpdated loads the source, replicates it, and streams opt.Updates
// rounds of updates of every todo, each round waited for until a
// checkpoint covers it (a stream batch keeps only a row's last change, so
// rounds in one batch would be one op).
func prepareUpdated(ctx context.Context, newDB func(context.Context, string) (string, error), opt CompactionOptions) (*drainData, error) {
	name := fmt.Sprintf("compaction_%d_%d", opt.Rows, opt.Updates)
	srcURI, storeURI, src, err := sourceAndStorage(ctx, newDB, name)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	if _, err := todos.Load(ctx, src, todos.Size{Lists: 1, Todos: opt.Rows, Seed: 8}); err != nil {
		return nil, err
	}
	cfg, err := config.LoadBytes("compaction.yaml", fmt.Appendf(nil, `
source: {uri: %q, slot_prefix: %q, heartbeat_interval: 1s}
storage: {uri: %q}
replication: {compaction: {interval: 0s}, stream: {batch_max_wait: 0s}}
sync_rules:
  content: |
%s
`, srcURI, name+"_", storeURI, indent(todos.Rules, "    ")))
	if err != nil {
		return nil, err
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: storeURI, MaxConns: 16, SynchronousCommit: "off"})
	if err != nil {
		return nil, err
	}
	if err := streamRounds(ctx, cfg, store, src, opt); err != nil {
		store.Close()
		return nil, err
	}
	if err := dropSlots(ctx, src); err != nil {
		store.Close()
		return nil, err
	}
	return &drainData{todos: opt.Rows, lists: 1, store: store, storeURI: storeURI}, nil
}

// streamRounds runs replication through the snapshot and every round of
// updates, then stops it.
func streamRounds(ctx context.Context, cfg *config.Config, store *bucketstore.Store, src *pgx.Conn, opt CompactionOptions) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := replication.New(replication.Options{Config: cfg, Store: store, Role: "replication"})
	errc := make(chan error, 1)
	go func() { errc <- rep.Run(rctx) }()
	began := time.Now()
	for round := -1; round < opt.Updates; round++ {
		if round >= 0 {
			if _, err := src.Exec(ctx, fmt.Sprintf(`UPDATE todos SET description = 'round %d ' || id`, round)); err != nil {
				return fmt.Errorf("update round %d: %w", round, err)
			}
		}
		// The insert position, not pg_current_wal_lsn (the write position):
		// with synchronous_commit off a commit returns before its record is
		// written, and a heartbeat's checkpoint between the two would end
		// the wait before the round is replicated.
		var text string
		if err := src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
			return fmt.Errorf("read the source WAL position: %w", err)
		}
		target, err := pglogrepl.ParseLSN(text)
		if err != nil {
			return err
		}
		for {
			cp, _, ok, err := store.Reader().ActiveCheckpoint(ctx)
			if err != nil {
				return err
			}
			if ok && cp.LSN >= target {
				break
			}
			select {
			case err := <-errc:
				return fmt.Errorf("replication stopped: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Millisecond): // polling the checkpoint; the round's commit is what it waits for
			}
		}
		if round%100 == 99 {
			logf(opt.Log, "compaction data: %d of %d rounds streamed in %s", round+1, opt.Updates, time.Since(began).Round(time.Second))
		}
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("stop replication: %w", err)
	}
	return nil
}
