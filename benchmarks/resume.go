package benchmarks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// resumeResult is what the resume check measured, in source rows.
type resumeResult struct {
	total     int64 // rows in the source
	committed int64 // snapshot rows committed when the first process had exited
	read1     int64 // rows the first process read
	read2     int64 // rows the second process read
	peakRSS   int64
}

// inFlight are rows the first process read but did not commit: the only
// ones a resume may read again.
func (r resumeResult) inFlight() int64 { return r.read1 - r.committed }

// readTwice are rows read by both processes.
func (r resumeResult) readTwice() int64 { return r.read1 + r.read2 - r.total }

// committedReread are committed rows the second process read again: the
// SPEC's "re-reads nothing else" means zero.
func (r resumeResult) committedReread() int64 { return r.read2 - (r.total - r.committed) }

func (r resumeResult) note(chunk int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Resume check (2 workers): the first `syncpipe run` was stopped (SIGTERM) with %d of %d rows committed; "+
		"it had read %d rows, so %d rows (%.1f chunks of %d) were in flight. The second process read %d rows to finish: "+
		"%d rows (%.1f chunks) were read twice, %d of them committed before the stop (must be 0). "+
		"Read counts are the `read` stage of each process's stage summary; committed rows are `snapshot_ranges.rows_done` after the first exit.",
		r.committed, r.total, r.read1, r.inFlight(), chunks(r.inFlight(), chunk), chunk, r.read2,
		r.readTwice(), chunks(r.readTwice(), chunk), r.committedReread())
	return b.String()
}

// resumeCheck snapshots into a fresh storage database with 2 workers,
// stops the child (SIGTERM) once StopAt of the rows are committed, starts
// a second child on the same storage and compares what both read with
// what storage had committed in between. The stage summary's read counts
// are exact per process, so this needs no instrumentation in syncpipe.
func resumeCheck(ctx context.Context, opt ScalingOptions, createDB func(context.Context, string) error,
	cfg func(db string, workers int) SnapshotConfig) (resumeResult, error) {
	r := resumeResult{total: int64(opt.Tables * opt.RowsPerTable)}
	stopAt := opt.StopAt
	if stopAt <= 0 {
		stopAt = 0.4
	}
	const db = "storage_resume"
	if err := createDB(ctx, db); err != nil {
		return r, err
	}
	c := cfg(db, 2)
	first, err := opt.Harness.start(ctx, c)
	if err != nil {
		return r, err
	}
	watch, err := pgx.Connect(ctx, c.Storage)
	if err != nil {
		_, _ = first.Stop()
		return r, fmt.Errorf("resume check: connect to storage: %w", err)
	}
	defer watch.Close(context.WithoutCancel(ctx))
	for {
		n, err := committedRows(ctx, watch)
		if err == nil && float64(n) >= stopAt*float64(r.total) {
			break
		}
		select {
		case <-first.exited:
			_, err := first.Stop()
			return r, fmt.Errorf("resume check: syncpipe exited before the stop point: %w", err)
		case <-ctx.Done():
			_, _ = first.Stop()
			return r, fmt.Errorf("resume check: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling storage: the stop point, not synchronisation
		}
	}
	s1, err := first.Stop()
	if err != nil {
		return r, fmt.Errorf("resume check, first process: %w", err)
	}
	if r.committed, err = committedRows(ctx, watch); err != nil {
		return r, err
	}
	if r.committed >= r.total {
		return r, fmt.Errorf("resume check: the snapshot finished before the stop; use a larger data set")
	}
	logf(opt.Log, "resume check: stopped with %d of %d rows committed", r.committed, r.total)
	second, err := opt.Harness.start(ctx, c)
	if err != nil {
		return r, err
	}
	_, waitErr := second.WaitFor(ctx, "snapshot done")
	s2, err := second.Stop()
	if waitErr != nil {
		return r, waitErr
	}
	if err != nil {
		return r, fmt.Errorf("resume check, second process: %w", err)
	}
	r.read1, r.read2 = s1.Stages.Stage("read").Rows, s2.Stages.Stage("read").Rows
	r.peakRSS = max(s1.PeakRSS, s2.PeakRSS)
	ops, _, err := storedOps(ctx, c.Storage)
	if err != nil {
		return r, err
	}
	if ops != r.total {
		return r, fmt.Errorf("resume check: storage holds %d ops after the resume, want %d (one per row)", ops, r.total)
	}
	if err := dropPrefixSlots(ctx, c.Source, c.SlotPrefix); err != nil {
		return r, err
	}
	logf(opt.Log, "resume check: %d rows read twice (%d in flight), %d committed rows read again", r.readTwice(), r.inFlight(), r.committedReread())
	return r, nil
}

func committedRows(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(rows_done), 0)::bigint FROM syncpipe.snapshot_ranges`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read snapshot progress: %w", err)
	}
	return n, nil
}
