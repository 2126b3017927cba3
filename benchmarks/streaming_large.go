package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// P3-large (SPEC §9): one source transaction of LargeUpdates single-row
// UPDATEs, far more than one storage write takes at the default batch
// limits (replication.stream.batch_max_rows 10000, batch_max_bytes
// 16 MiB), so syncpipe writes it in pieces and publishes no checkpoint
// until the last one. Measured in every run next to the 1k-row
// transactions, so the ratio of the two rates is taken in one run.

// largeStmtRows is how many rows each UPDATE statement of the large
// transaction changes (one row change each in the WAL, as in the 1k-row
// transactions).
const largeStmtRows = 10_000

// largeRun is one measured large transaction.
type largeRun struct {
	catchUpRun
	// ran is the source transaction's own time, BEGIN to COMMIT returned,
	// in stmts statements; committed is when COMMIT returned.
	ran       time.Duration
	stmts     int
	committed time.Time
	// decode and decodeFirst are the decode-only consumer's times from
	// START_REPLICATION to the last and to the first UPDATE.
	decode, decodeFirst time.Duration
	// txnWAL is the WAL the transaction wrote; decodeSlotWAL the WAL from
	// the decode-only slot's restart_lsn to the end of the transaction
	// (for syncpipe's slot see catchUpRun.slotWAL): what the walsender
	// decodes before it can send the transaction's first change.
	txnWAL, decodeSlotWAL int64
	// spilled is what syncpipe's walsender wrote to disk while decoding
	// (pg_stat_replication_slots.spill_bytes; -1 if unreadable).
	spilled int64
}

// commitToCheckpoint is the time from the source commit until storage
// published a checkpoint covering it.
func (lr largeRun) commitToCheckpoint() time.Duration { return lr.end.Sub(lr.committed) }

// large runs P3-large once: a decode-only slot is created, the transaction
// committed with syncpipe stopped, and a syncpipe child per target (in the
// run's order) started at once and timed like the 1k-row catch-up
// (START_REPLICATION → a published checkpoint covers the commit), storage
// polled meanwhile for the pieces. The decode-only consumer reads the same
// transaction afterwards, so that the time from the commit to the first
// target's checkpoint is that syncpipe's alone; the targets after the first
// are timed from their process start, as if the commit had happened then.
// It adds a row per target and one for the consumer to rows.
func (sr *streamRun) large(ctx context.Context, run int, rows *rowSet) error {
	dec, err := newDecodeOnly(ctx, sr.cluster.URI("app"), "bench_decode_large")
	if err != nil {
		return err
	}
	defer dec.Close(context.WithoutCancel(ctx))
	var txn largeRun
	changes, err := sr.updateOneTxn(ctx, fmt.Sprintf("run %d", run+1), &txn)
	if err != nil {
		return err
	}
	if txn.decodeSlotWAL, err = slotBehind(ctx, sr.src, dec.slot); err != nil {
		return err
	}
	for i, t := range sr.order(run) {
		lr := txn
		spill0 := sr.spillBytes(ctx, t)
		lr.catchUpRun, err = sr.catchUp(ctx, t, &t.largeCost, changes, true)
		if err != nil {
			return err
		}
		if i > 0 {
			lr.committed = lr.launched
		}
		if spill1 := sr.spillBytes(ctx, t); spill0 >= 0 && spill1 >= 0 {
			lr.spilled = spill1 - spill0
		} else {
			lr.spilled = -1
		}
		logf(sr.opt.Log, "run %d: %s, one %s-row transaction (%s of WAL; slot restart_lsn %s before its end; walsender spilled %s): %.0f changes/s (%d ops), commit → checkpoint %s, first piece stored %s after START_REPLICATION, peak RSS %s",
			run+1, t.name(), fmtCount(sr.opt.LargeUpdates), fmtBytes(lr.txnWAL), fmtBytes(lr.slotWAL), fmtBytes(lr.spilled), rate(lr.Sample), lr.Ops,
			lr.commitToCheckpoint().Round(time.Millisecond), lr.pieces.since(lr.begin), fmtBytes(lr.Child.PeakRSS))
		t.larges = append(t.larges, lr)
	}
	decode, decodeFirst, err := dec.consume(ctx, "syncpipe", changes)
	if err != nil {
		return err
	}
	logf(sr.opt.Log, "run %d: decode-only, one %s-row transaction: %.0f changes/s, first change after %s",
		run+1, fmtCount(sr.opt.LargeUpdates), float64(changes)/decode.Seconds(), decodeFirst.Round(time.Millisecond))
	rows.add(largeRowName(streamBaseline, sr.opt), streamBaseline, Sample{Duration: decode, Rows: changes})
	// Rows in target order, whatever order this run took.
	for _, t := range sr.targets {
		lr := &t.larges[len(t.larges)-1]
		lr.decode, lr.decodeFirst = decode, decodeFirst
		rows.add(t.largeName(sr.opt), t.name(), lr.Sample)
	}
	return nil
}

// updateOneTxn commits opt.LargeUpdates single-row updates in one
// transaction, in statements of largeStmtRows, and returns the rows
// changed (fewer only if a statement named a todo twice).
func (sr *streamRun) updateOneTxn(ctx context.Context, label string, lr *largeRun) (int64, error) {
	n := sr.opt.LargeUpdates
	logf(sr.opt.Log, "%s: committing %d updates in one transaction…", label, n)
	wal0, err := walPos(ctx, sr.src)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var changes int64
	err = pgx.BeginFunc(ctx, sr.src, func(tx pgx.Tx) error {
		for done := 0; done < n; done += largeStmtRows {
			tag, err := tx.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = ANY($1::uuid[])`, sr.take(min(largeStmtRows, n-done)))
			if err != nil {
				return err
			}
			changes += tag.RowsAffected()
			lr.stmts++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("large transaction: %w", err)
	}
	lr.committed = time.Now()
	lr.ran = lr.committed.Sub(start)
	wal1, err := walPos(ctx, sr.src)
	if err != nil {
		return 0, err
	}
	lr.txnWAL = wal1 - wal0
	return changes, nil
}

// liveLarge is P3-large with t's syncpipe running: a child streams, caught
// up, while the large transaction runs and commits, and the time from the
// commit until a published checkpoint covers it is what a client waits.
// The walsender decodes the transaction as it is written (spilling it to
// disk), but sends it only once it has committed (pgoutput version 1).
func (sr *streamRun) liveLarge(ctx context.Context, t *streamTarget) (largeRun, error) {
	var lr largeRun
	child, err := sr.startChild(ctx, t)
	if err != nil {
		return lr, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = child.Stop()
		}
	}()
	if _, err := sr.waitCaughtUp(ctx, t, child); err != nil {
		return lr, err
	}
	stopWatch, err := sr.watchPieces(ctx, t)
	if err != nil {
		return lr, err
	}
	lr.Rows, err = sr.updateOneTxn(ctx, "syncpipe running", &lr)
	if err == nil {
		lr.end, err = sr.waitCaughtUp(ctx, t, child)
	}
	pw, werr := stopWatch()
	lr.pieces = pw
	if err == nil {
		err = werr
	}
	if err != nil {
		return lr, err
	}
	stopped = true
	if lr.Child, err = child.Stop(); err != nil {
		return lr, err
	}
	logf(sr.opt.Log, "%s running: one %s-row transaction (ran %s): commit → checkpoint %s, first piece stored %s after the commit, peak RSS %s",
		t.name(), fmtCount(sr.opt.LargeUpdates), lr.ran.Round(time.Millisecond), lr.commitToCheckpoint().Round(time.Millisecond),
		pw.since(lr.committed), fmtBytes(lr.Child.PeakRSS))
	// No settle: it is the last measurement.
	return lr, nil
}

// spillBytes is the spill_bytes of t's group's slot (-1 if unreadable:
// pg_stat_replication_slots is PostgreSQL 14+).
func (sr *streamRun) spillBytes(ctx context.Context, t *streamTarget) int64 {
	slot, err := sr.groupSlot(ctx, t)
	if err != nil {
		return -1
	}
	var n int64
	if err := sr.src.QueryRow(ctx, `SELECT coalesce(max(spill_bytes), -1) FROM pg_stat_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
		return -1
	}
	return n
}

// pieceWatch is what polling the group's position inside a partly stored
// transaction saw: the first and the last piece seen in storage, with the
// changes storage held of the transaction then.
type pieceWatch struct {
	first, last   time.Time
	firstN, lastN int64
}

// since is how long after t the first piece was seen ("—" if none was).
func (w pieceWatch) since(t time.Time) string {
	if w.first.IsZero() {
		return "—"
	}
	return w.first.Sub(t).Round(time.Millisecond).String()
}

// pieceInterval is how often watchPieces polls storage.
const pieceInterval = 50 * time.Millisecond

// watchPieces polls t's storage, on a connection of its own, for the
// changes it holds of a partly written source transaction
// (groups.stream_txn_changes, set while the transaction's pieces are
// written) until stop is called.
func (sr *streamRun) watchPieces(ctx context.Context, t *streamTarget) (stop func() (pieceWatch, error), err error) {
	conn, err := pgx.Connect(ctx, t.storageURI())
	if err != nil {
		return nil, fmt.Errorf("watch pieces: %w", err)
	}
	var w pieceWatch
	var werr error
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(pieceInterval)
		defer tick.Stop()
		for {
			var n int64
			err := conn.QueryRow(ctx, `SELECT coalesce(max(stream_txn_changes) FILTER (WHERE stream_txn_lsn IS NOT NULL), 0)
				FROM syncpipe.groups WHERE state = 'ACTIVE'`).Scan(&n)
			if err != nil {
				werr = fmt.Errorf("watch pieces: %w", err)
				return
			}
			if at := time.Now(); n > 0 {
				if w.first.IsZero() {
					w.first, w.firstN = at, n
				}
				if n > w.lastN {
					w.last, w.lastN = at, n
				}
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() (pieceWatch, error) {
		close(quit)
		<-finished
		conn.Close(context.WithoutCancel(ctx))
		return w, werr
	}, nil
}

// largeRowName names a P3-large row after its 1k-row counterpart.
func largeRowName(base string, opt StreamingOptions) string {
	return fmt.Sprintf("%s, one %s-row transaction", base, fmtCount(opt.LargeUpdates))
}

// largeRowsNote says which rows the large transaction updates.
func largeRowsNote(opt StreamingOptions) string {
	switch {
	case opt.LargeUpdates == opt.Todos:
		return "every todo once"
	case opt.LargeUpdates < opt.Todos:
		return fmt.Sprintf("%d distinct todos", opt.LargeUpdates)
	default:
		return fmt.Sprintf("each todo about %.1f times", float64(opt.LargeUpdates)/float64(max(opt.Todos, 1)))
	}
}

// fmtCount is 1000000 → "1M", 100000 → "100k", 1500 → "1500".
func fmtCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	default:
		return fmt.Sprint(n)
	}
}

// medianOf is the median of f over the runs.
func medianOf(larges []largeRun, f func(largeRun) time.Duration) time.Duration {
	ds := make([]time.Duration, len(larges))
	for i, lr := range larges {
		ds[i] = f(lr)
	}
	return percentile(ds, 0.5)
}

// afterFirstPiece is the rate at which syncpipe stored the transaction
// once its first piece was in storage: the changes after that piece over
// the time from it to the checkpoint (0 if no piece was seen).
func (lr largeRun) afterFirstPiece() float64 {
	if lr.pieces.first.IsZero() || !lr.end.After(lr.pieces.first) {
		return 0
	}
	return float64(lr.Rows-lr.pieces.firstN) / lr.end.Sub(lr.pieces.first).Seconds()
}

// largeNotes reports P3-large of target t beyond its rows: where the time
// from the commit to the checkpoint goes, the per-run ratios to its 1k-row
// transactions, the CPU per change and the stage-time summary of the large
// transactions' syncpipe runs.
func (sr *streamRun) largeNotes(t *streamTarget) []string {
	opt := sr.opt
	larges, smallRates := t.larges, t.smallRates
	n := fmtCount(opt.LargeUpdates)
	var ratios, rss []string
	var stages Breakdown
	var own, all time.Duration
	for i, lr := range larges {
		ratios = append(ratios, fmt.Sprintf("%.0f / %.0f = %.0f%%", rate(lr.Sample), smallRates[i], 100*rate(lr.Sample)/max(smallRates[i], 1)))
		rss = append(rss, fmtBytes(lr.Child.PeakRSS))
		stages.Add(lr.Child.Stages)
		own += lr.Child.User + lr.Child.System
		all += lr.OwnCPU
	}
	med := func(f func(largeRun) time.Duration) string {
		return medianOf(larges, f).Round(time.Millisecond).String()
	}
	var afters []float64
	for _, lr := range larges {
		afters = append(afters, lr.afterFirstPiece())
	}
	notes := []string{
		fmt.Sprintf("P3-large, %s, one %s-row transaction (%s; medians of %d runs): the source transaction ran %s (%d UPDATE statements of %d rows). "+
			"Commit → published checkpoint %s = commit → syncpipe's storage open %s (process start, migration check) + start-up %s "+
			"+ START_REPLICATION → checkpoint %s, of which START_REPLICATION → first piece in storage %s "+
			"(the walsender decodes the whole transaction — spilling %s of it to disk, past logical_decoding_work_mem — before it sends the first change: "+
			"the decode-only consumer's first change came %s after its START_REPLICATION, its last %s), then the rest at %.0f changes/s. "+
			"WAL: the transaction wrote %s; from its slot's restart_lsn to the commit the walsender read %s for syncpipe, %s for the decode-only consumer. "+
			"Rate vs the same run's 1k-row transactions: %s. Peak RSS per run: %s.",
			t.name(), n, largeRowsNote(opt), len(larges), med(func(lr largeRun) time.Duration { return lr.ran }), larges[0].stmts, largeStmtRows,
			med(largeRun.commitToCheckpoint), med(func(lr largeRun) time.Duration { return lr.started.Sub(lr.committed) }),
			med(func(lr largeRun) time.Duration { return lr.begin.Sub(lr.started) }),
			med(func(lr largeRun) time.Duration { return lr.Duration }),
			med(func(lr largeRun) time.Duration {
				if lr.pieces.first.IsZero() {
					return lr.Duration
				}
				return lr.pieces.first.Sub(lr.begin)
			}),
			fmtBytes(medianInt(larges, func(lr largeRun) int64 { return lr.spilled })),
			med(func(lr largeRun) time.Duration { return lr.decodeFirst }), med(func(lr largeRun) time.Duration { return lr.decode }),
			medianFloat(afters), fmtBytes(medianInt(larges, func(lr largeRun) int64 { return lr.txnWAL })),
			fmtBytes(medianInt(larges, func(lr largeRun) int64 { return lr.slotWAL })),
			fmtBytes(medianInt(larges, func(lr largeRun) int64 { return lr.decodeSlotWAL })),
			strings.Join(ratios, ", "), strings.Join(rss, ", ")),
	}
	if live := t.live; live != nil {
		notes = append(notes, fmt.Sprintf("P3-large with syncpipe running (%s, one run, after the others): the transaction ran %s while syncpipe streamed; "+
			"commit → published checkpoint %s, the first piece in storage %s after the commit (the walsender decoded the transaction while it ran, but sends it only from its commit on); "+
			"peak RSS %s.", t.name(), live.ran.Round(time.Millisecond), live.commitToCheckpoint().Round(time.Millisecond), live.pieces.since(live.committed),
			fmtBytes(live.Child.PeakRSS)))
	}
	c := &t.largeCost
	if len(c.cpu) > 0 {
		notes = append(notes, fmt.Sprintf("P3-large CPU per streamed change, %s: syncpipe process %s, Postgres %s (by process: %s); WAL per change decoded by the walsender %d bytes, written by storage %d bytes.",
			t.name(), c.perChange(own).Round(100*time.Nanosecond), c.perChange(all-own).Round(100*time.Nanosecond), c.roles(),
			c.decodedWAL/max(c.changes, 1), c.storageWAL/max(c.changes, 1)))
	}
	if len(stages.Stages) > 0 {
		var sb strings.Builder
		_ = stages.WriteTable(&sb)
		notes = append(notes, fmt.Sprintf("P3-large stage-time summary of %s over its %d syncpipe runs (busiest stage per worker: **%s**):\n\n```\n%s```",
			t.name(), len(larges), stages.Busiest(), sb.String()))
	}
	return notes
}

// largeLine is P3-large of a target other than the primary in one line:
// its rate against its own 1k-row rate per run, where the time goes and
// what it cost.
func (sr *streamRun) largeLine(t *streamTarget) string {
	var ratios, rss []string
	var stages Breakdown
	var afters []float64
	for i, lr := range t.larges {
		ratios = append(ratios, fmt.Sprintf("%.0f / %.0f = %.0f%%", rate(lr.Sample), t.smallRates[i], 100*rate(lr.Sample)/max(t.smallRates[i], 1)))
		rss = append(rss, fmtBytes(lr.Child.PeakRSS))
		stages.Add(lr.Child.Stages)
		afters = append(afters, lr.afterFirstPiece())
	}
	first := medianOf(t.larges, func(lr largeRun) time.Duration {
		if lr.pieces.first.IsZero() {
			return lr.Duration
		}
		return lr.pieces.first.Sub(lr.begin)
	})
	c := &t.largeCost
	// The whole stage table, not only the busiest stage: comparing builds,
	// where the wall time goes is what tells two equal CPU costs apart.
	var table strings.Builder
	_ = stages.WriteTable(&table)
	return fmt.Sprintf("P3-large, %s (medians of %d runs; timed from its process start where another target consumed the transaction first): "+
		"commit → published checkpoint %s, START_REPLICATION → first piece in storage %s, then %.0f changes/s; walsender spilled %s. "+
		"Rate vs its 1k-row transactions: %s. CPU per change: syncpipe %s, Postgres by process: %s. Peak RSS per run: %s. "+
		"Stage-time summary over its runs (busiest stage per worker: **%s**):\n\n```\n%s```",
		t.name(), len(t.larges), medianOf(t.larges, largeRun.commitToCheckpoint).Round(time.Millisecond), first.Round(time.Millisecond),
		medianFloat(afters), fmtBytes(medianInt(t.larges, func(lr largeRun) int64 { return lr.spilled })),
		strings.Join(ratios, ", "), c.perChange(c.own).Round(100*time.Nanosecond), c.roles(), strings.Join(rss, ", "), stages.Busiest(), table.String())
}

// medianInt is the median of f over the runs.
func medianInt(larges []largeRun, f func(largeRun) int64) int64 {
	xs := make([]int64, len(larges))
	for i, lr := range larges {
		xs[i] = f(lr)
	}
	return medianInt64(xs)
}

// medianFloat is the median of xs (0 for none).
func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// largeBars are the P3-large bars, decided on target t: the large
// transaction's rate against the 1k-row transactions' of the same run, and
// syncpipe's peak RSS through it (every target's).
func (sr *streamRun) largeBars(res Result, t *streamTarget) []Bar {
	n := fmtCount(sr.opt.LargeUpdates)
	larges := t.larges
	lg, small := baseRate(res, t.largeName(sr.opt)), baseRate(res, t.name())
	ratio := lg / max(small, 1)
	var peak int64
	for _, o := range sr.targets {
		for _, lr := range o.larges {
			peak = max(peak, lr.Child.PeakRSS)
		}
	}
	ck := medianOf(larges, largeRun.commitToCheckpoint)
	bars := []Bar{
		{ID: "P3-large", Measure: "one " + n + "-row transaction: throughput", Bar: "≥ 50% of the 1k-row-txn rate (same run)",
			Value: fmt.Sprintf("%s: %.0f changes/s = %.0f%% of %.0f; commit → checkpoint %s", topologyLabel(t.topology), lg, 100*ratio, small, ck.Round(100*time.Millisecond)),
			Met:   ratio >= 0.50},
		{ID: "P3-large", Measure: "one " + n + "-row transaction: syncpipe peak RSS", Bar: "< 500 MB",
			Value: fmtBytes(peak), Met: peak < RSSBar},
	}
	for _, o := range sr.targets {
		if o != t {
			v, s := baseRate(res, o.largeName(sr.opt)), baseRate(res, o.name())
			bars[0].Value += fmt.Sprintf("; %s: %.0f = %.0f%%", strings.TrimPrefix(o.name(), streamSyncpipe+", "), v, 100*v/max(s, 1))
		}
	}
	if live := t.live; live != nil {
		bars[0].Value += fmt.Sprintf(" (syncpipe stopped at the commit; running: %s)", live.commitToCheckpoint().Round(100*time.Millisecond))
		peak = max(peak, live.Child.PeakRSS)
		bars[1].Value, bars[1].Met = fmtBytes(peak), peak < RSSBar
	}
	if !bars[0].Met {
		first := medianOf(larges, func(lr largeRun) time.Duration {
			if lr.pieces.first.IsZero() {
				return lr.Duration
			}
			return lr.pieces.first.Sub(lr.begin)
		})
		total := medianOf(larges, func(lr largeRun) time.Duration { return lr.Duration })
		var afters []float64
		for _, lr := range larges {
			afters = append(afters, lr.afterFirstPiece())
		}
		bars[0].Note = fmt.Sprintf("START_REPLICATION → first piece in storage took %s of the %s (the walsender decodes the whole transaction before sending any of it; decode-only consumer: first change after %s); "+
			"after it syncpipe stored the rest at %.0f changes/s = %.0f%% of the 1k-row-txn rate",
			first.Round(100*time.Millisecond), total.Round(100*time.Millisecond),
			medianOf(larges, func(lr largeRun) time.Duration { return lr.decodeFirst }).Round(100*time.Millisecond),
			medianFloat(afters), 100*medianFloat(afters)/max(small, 1))
	}
	return bars
}
