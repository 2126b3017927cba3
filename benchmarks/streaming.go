package benchmarks

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// StreamingOptions configures the P3 streaming scenario.
type StreamingOptions struct {
	Todos, Lists int
	// Updates single-row UPDATEs per run, TxnRows of them per transaction.
	Updates, TxnRows int
	Runs             int
	// SteadyRate changes/s for SteadyFor measure the replication lag, in
	// transactions of SteadyTxnRows updates.
	SteadyRate    int
	SteadyFor     time.Duration
	SteadyTxnRows int
	// LargeUpdates single-row UPDATEs are committed in ONE transaction per
	// run (P3-large; 0 = not measured), far more than a storage write
	// takes at the default batch limits, so syncpipe writes it in pieces.
	LargeUpdates int
	Log          io.Writer
	Harness      *Harness
}

// runStreamingScenario: full is SPEC §9 P3 (200k updates in 1k-row
// transactions; 5k changes/s for 30 s) and P3-large (1M updates in one
// transaction, so the todo table has 1M rows: each is updated once); small
// has a fifth of the 1k-row-txn updates, 100k in the large transaction
// and 10 s of load.
func runStreamingScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	updates := pick(0, 40_000, 200_000, p.Scale)
	large := pick(0, 100_000, 1_000_000, p.Scale)
	return RunStreaming(ctx, StreamingOptions{
		Todos: pick(p.Rows, max(updates, large), max(updates, large), p.Scale), Lists: pick(p.Lists, 100, 1000, p.Scale),
		Updates: updates, TxnRows: 1000, Runs: pick(p.Runs, 3, 3, p.Scale),
		SteadyRate: 5000, SteadyFor: pick(0, 10*time.Second, 30*time.Second, p.Scale), SteadyTxnRows: 100,
		LargeUpdates: large, Log: p.Log, Harness: p.Harness})
}

// streamingRules are the todo rules plus a one-row marker table the lag
// measurement writes in every transaction.
const streamingRules = todos.Rules + `  marks:
    data:
      - SELECT id, seq FROM bench_marks
`

// Row names of the streaming result.
const (
	streamBaseline = "decode-only pglogrepl consumer"
	streamSyncpipe = "syncpipe streaming"
)

// RunStreaming measures SPEC §9 P3. Throughput: with syncpipe stopped,
// Updates single-row UPDATEs are committed in transactions of TxnRows; then
// a decode-only pglogrepl consumer (its slot created before the updates)
// and a `syncpipe run` child process each consume exactly that WAL, both
// timed from just before START_REPLICATION (the child's "streaming from the
// replication slot" log line) until, for the child, storage publishes a
// checkpoint at the updates' end. P3-large, in the same runs: the same for
// LargeUpdates single-row UPDATEs in one transaction (see large), then once
// with syncpipe running (liveLarge). Between catch-ups the slot is moved on,
// untimed (settle). Lag: with
// syncpipe running, transactions arrive at SteadyRate changes/s, and each
// one's lag is the time from its commit until a published checkpoint
// includes it (seen through a marker row the transaction also updates).
func RunStreaming(ctx context.Context, opt StreamingOptions) (Result, error) {
	res, _, err := runStreaming(ctx, opt)
	return res, err
}

// runStreaming is RunStreaming, also returning the P3-large runs.
func runStreaming(ctx context.Context, opt StreamingOptions) (res Result, larges []largeRun, err error) {
	params := fmt.Sprintf("P3: %d todos / %d lists; throughput: %d single-row UPDATEs in %d-row transactions consumed from the slot, timed from START_REPLICATION (syncpipe: until a published checkpoint covers them), median of %d runs",
		opt.Todos, opt.Lists, opt.Updates, opt.TxnRows, opt.Runs)
	if opt.LargeUpdates > 0 {
		params += fmt.Sprintf("; P3-large, in the same runs: %d single-row UPDATEs in one transaction (%s), timed the same way, default batch limits (storage writes of ≤ 10000 rows / 16 MiB: the transaction is written in pieces)",
			opt.LargeUpdates, largeRowsNote(opt))
	}
	params += fmt.Sprintf("; lag: %d changes/s in %d-row transactions for %s; one cluster (fsync on), storage synchronous_commit=off; syncpipe runs as a child process (`syncpipe run --role replication`)",
		opt.SteadyRate, opt.SteadyTxnRows, opt.SteadyFor)
	res = Result{Scenario: "streaming", Date: time.Now(), Params: params}
	if opt.Harness == nil {
		return res, larges, fmt.Errorf("streaming scenario: no syncpipe harness")
	}
	cluster, src, err := startTodos(ctx, opt.Log, todos.Size{Lists: opt.Lists, Todos: opt.Todos, Seed: 42})
	if err != nil {
		return res, larges, err
	}
	defer cluster.Stop()
	defer src.Close(context.WithoutCancel(ctx))
	if _, err := src.Exec(ctx, `CREATE TABLE bench_marks (id int PRIMARY KEY, seq bigint NOT NULL);
		INSERT INTO bench_marks VALUES (1, 0)`); err != nil {
		return res, larges, fmt.Errorf("create marker table: %w", err)
	}
	ids, err := pgx.CollectRows(mustQuery(ctx, src, `SELECT id::text FROM todos ORDER BY id`), pgx.RowTo[string])
	if err != nil {
		return res, larges, fmt.Errorf("read todo ids: %w", err)
	}
	if err := cluster.CreateDatabase(ctx, "storage"); err != nil {
		return res, larges, err
	}
	sr := &streamRun{opt: opt, cluster: cluster, src: src, ids: ids,
		cfg: opt.Harness.config(SnapshotConfig{Source: cluster.URI("app"), Storage: cluster.URI("storage"),
			SlotPrefix: "bench_", Rules: streamingRules, Workers: 2, ChunkRows: 10000})}
	sr.storage, err = pgx.Connect(ctx, cluster.URI("storage"))
	if err != nil {
		return res, larges, fmt.Errorf("connect to storage: %w", err)
	}
	defer sr.storage.Close(context.WithoutCancel(ctx))

	// Initial snapshot, then streaming caught up.
	logf(opt.Log, "initial snapshot…")
	child, err := sr.startChild(ctx)
	if err != nil {
		return res, larges, err
	}
	if _, err := child.WaitFor(ctx, "snapshot done"); err != nil {
		return res, larges, err
	}
	if _, err := sr.waitCaughtUp(ctx, child); err != nil {
		return res, larges, err
	}
	st, err := child.Stop()
	if err != nil {
		return res, larges, err
	}
	res.PeakRSS = st.PeakRSS
	if _, err := sr.settle(ctx); err != nil {
		return res, larges, err
	}

	var rows rowSet
	stages := &Breakdown{}
	var ownCPU, allCPU time.Duration  // syncpipe process; it plus the cluster
	var decodeWalsender time.Duration // the walsender's CPU for the baseline
	var smallRates []float64          // per run, for the per-run ratios of P3-large
	var slotLags, ownWAL []int64      // per 1k-row catch-up: WAL its walsender decoded, the updates' own
	var settles []time.Duration
	for r := range opt.Runs {
		dec, err := newDecodeOnly(ctx, cluster.URI("app"), "bench_decode_only")
		if err != nil {
			return res, larges, err
		}
		wal0, err := walPos(ctx, src)
		if err == nil {
			err = sr.update(ctx, r)
		}
		var wal1 int64
		if err == nil {
			wal1, err = walPos(ctx, src)
		}
		if err != nil {
			dec.Close(ctx)
			return res, larges, err
		}
		data := filepath.Join(cluster.Dir(), "data")
		procs0 := clusterProcs(data)
		d, _, err := dec.consume(ctx, "syncpipe", int64(opt.Updates))
		if err == nil {
			decodeWalsender += clusterProcs(data).since(procs0)["walsender"]
		}
		dec.Close(context.WithoutCancel(ctx))
		if err != nil {
			return res, larges, err
		}
		rows.add(streamBaseline, "", Sample{Duration: d, Rows: int64(opt.Updates)})
		logf(opt.Log, "run %d: decode-only: %.0f changes/s", r+1, float64(opt.Updates)/d.Seconds())

		cu, err := sr.catchUp(ctx, &sr.smallCost, int64(opt.Updates), false)
		if err != nil {
			return res, larges, err
		}
		stages.Add(cu.Child.Stages)
		res.PeakRSS = max(res.PeakRSS, cu.Child.PeakRSS)
		ownCPU += cu.Child.User + cu.Child.System
		allCPU += cu.OwnCPU
		rows.add(streamSyncpipe, streamBaseline, cu.Sample)
		smallRates = append(smallRates, rate(cu.Sample))
		slotLags, ownWAL = append(slotLags, cu.slotWAL), append(ownWAL, wal1-wal0)
		settles = append(settles, cu.settle)
		logf(opt.Log, "run %d: syncpipe: %.0f changes/s (%d ops; slot restart_lsn %s behind, the updates wrote %s), peak RSS %s",
			r+1, rate(cu.Sample), cu.Ops, fmtBytes(cu.slotWAL), fmtBytes(wal1-wal0), fmtBytes(cu.Child.PeakRSS))

		if opt.LargeUpdates > 0 {
			lr, err := sr.large(ctx, r)
			if err != nil {
				return res, larges, err
			}
			larges = append(larges, lr)
			settles = append(settles, lr.settle)
			res.PeakRSS = max(res.PeakRSS, lr.Child.PeakRSS)
			rows.add(largeRowName(streamBaseline, opt), streamBaseline, Sample{Duration: lr.decode, Rows: lr.Rows})
			rows.add(largeRowName(streamSyncpipe, opt), streamSyncpipe, lr.Sample)
		}
	}
	res.Rows = rows.list()
	res.Stages = stages
	perChange := func(d time.Duration) time.Duration {
		return d / time.Duration(max(opt.Runs*opt.Updates, 1))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("CPU per streamed change: syncpipe process %s, cluster (walsender, storage backends) %s.",
		perChange(ownCPU), perChange(allCPU-ownCPU)))
	if len(sr.smallCost.roleCPU) > 0 {
		res.Notes = append(res.Notes, "Cluster CPU per streamed change by process (live processes only): "+sr.smallCost.roles()+
			fmt.Sprintf(". WAL written while catching up (storage's, which the walsender reads as well as the source's): %d bytes per change.",
				sr.smallCost.walPerChange()))
	}

	res.Notes = append(res.Notes, fmt.Sprintf("WAL syncpipe's walsender decoded per 1k-row catch-up, from its slot's restart_lsn: median %s (the updates themselves wrote %s). "+
		"After every catch-up, untimed, a syncpipe child of its own streams until the slot's restart_lsn has passed the catch-up's end (median %s; see streaming_slot.go), so that no catch-up decodes the WAL of the one before: "+
		"restart_lsn moves only past a running-transactions record the client has confirmed, and a child stopped right after catching up leaves it behind.",
		fmtBytes(medianInt64(slotLags)), fmtBytes(medianInt64(ownWAL)), percentile(slices.Clone(settles), 0.5).Round(100*time.Millisecond)))
	if len(sr.smallCost.startups) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Start-up before streaming (storage open → START_REPLICATION: preflight, group state), not in the throughput: median %s.",
			percentile(sr.smallCost.startups, 0.5).Round(time.Millisecond)))
	}
	if len(larges) > 0 {
		live, err := sr.liveLarge(ctx)
		if err != nil {
			return res, larges, err
		}
		sr.live = &live
		res.PeakRSS = max(res.PeakRSS, live.Child.PeakRSS)
		res.Notes = append(res.Notes, sr.largeNotes(larges, smallRates)...)
	}
	lags, achieved, lst, err := sr.steady(ctx)
	if err != nil {
		return res, larges, err
	}
	res.PeakRSS = max(res.PeakRSS, lst.PeakRSS)
	p50, p99, worst := percentile(lags, 0.50), percentile(lags, 0.99), slices.Max(lags)
	res.Notes = append(res.Notes, fmt.Sprintf("Replication lag at %.0f changes/s (target %d) over %s: %d transactions, commit → included in a published checkpoint: p50 %s, p99 %s, max %s.",
		achieved, opt.SteadyRate, opt.SteadyFor, len(lags), p50, p99, worst))
	res.Bars = streamingBars(res, achieved, p99)
	if !res.Bars[0].Met {
		busiest := stages.Busiest()
		st := stages.Stage(busiest)
		ws := perChange(sr.smallCost.roleCPU["walsender"])
		res.Bars[0].Note = fmt.Sprintf("busiest stage %s (%.0f rows per busy second); CPU per change: syncpipe %s + cluster %s = %s, which caps 2 cores at ≈ %.0fk changes/s. "+
			"Of the cluster's share the storage backends take %s and the walsender %s, against %s for the decode-only consumer's "+
			"(syncpipe's also reads storage's WAL, %d bytes per change, as source and storage share the cluster). At the %s per change it spent here, the walsender alone (one process, one core) "+
			"tops out at %.0fk changes/s = %.0f%% of the baseline",
			busiest, float64(st.Rows)/max(st.Busy, time.Nanosecond).Seconds()*float64(max(st.Workers, 1)),
			perChange(ownCPU).Round(100*time.Nanosecond), perChange(allCPU-ownCPU).Round(100*time.Nanosecond),
			perChange(allCPU).Round(100*time.Nanosecond), 2/perChange(allCPU).Seconds()/1000,
			perChange(sr.smallCost.roleCPU["backend storage"]).Round(100*time.Nanosecond), ws.Round(100*time.Nanosecond),
			perChange(decodeWalsender).Round(100*time.Nanosecond), sr.smallCost.walPerChange(),
			ws.Round(100*time.Nanosecond), 1/max(ws, time.Nanosecond).Seconds()/1000, 100/max(ws, time.Nanosecond).Seconds()/max(baseRate(res, streamBaseline), 1))
	}
	if len(larges) > 0 {
		res.Bars = append(res.Bars, sr.largeBars(res, larges)...)
	}
	return res, larges, nil
}

// walPos is the source's current WAL insert position, in bytes.
func walPos(ctx context.Context, src *pgx.Conn) (int64, error) {
	var n int64
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&n); err != nil {
		return 0, fmt.Errorf("read WAL position: %w", err)
	}
	return n, nil
}

// medianInt64 is the median of xs (0 for none).
func medianInt64(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// baseRate is the median changes/s of the named row (0 if absent).
func baseRate(res Result, name string) float64 {
	for _, r := range res.Rows {
		if r.Name == name && len(r.Samples) > 0 {
			med, _, _ := r.rate(func(s Sample) int64 { return s.Rows })
			return med
		}
	}
	return 0
}

func streamingBars(res Result, achieved float64, p99 time.Duration) []Bar {
	sp, base := baseRate(res, streamSyncpipe), baseRate(res, streamBaseline)
	ratio := sp / max(base, 1)
	return []Bar{
		{ID: "P3", Measure: "streaming throughput", Bar: "≥ 70% of a decode-only consumer",
			Value: fmt.Sprintf("%.0f changes/s = %.0f%% of %.0f", sp, 100*ratio, base), Met: ratio >= 0.70},
		{ID: "P3", Measure: "replication lag", Bar: "p99 < 100 ms at 5k changes/s steady",
			Value: fmt.Sprintf("p99 %s at %.0f changes/s", p99.Round(time.Millisecond/10), achieved),
			Met:   p99 < 100*time.Millisecond && achieved >= 0.95*5000},
	}
}

// streamRun holds what the phases of the streaming scenario share.
type streamRun struct {
	opt     StreamingOptions
	cluster *pgcluster.Cluster
	src     *pgx.Conn
	storage *pgx.Conn
	ids     []string
	cfg     string
	next    int // next todo to update
	// smallCost and largeCost add up what the catch-ups of the 1k-row and
	// of the large transactions cost.
	smallCost, largeCost catchUpCost
	// live is the P3-large run with syncpipe running (nil before it).
	live *largeRun
}

// catchUpCost adds up what catch-ups cost, for per-change figures.
type catchUpCost struct {
	// changes streamed by the catch-ups added up here.
	changes int64
	// roleCPU is the cluster's CPU time by process role (see clusterProcs).
	roleCPU map[string]time.Duration
	// storageWAL is the WAL written (by storage: the source is idle then),
	// which the walsender reads too.
	storageWAL int64
	// startups are the times from process start (storage open) to the
	// stream's start, kept out of the throughput.
	startups []time.Duration
}

// perChange divides d by the changes streamed.
func (c *catchUpCost) perChange(d time.Duration) time.Duration {
	return d / time.Duration(max(c.changes, 1))
}

func (c *catchUpCost) walPerChange() int64 { return c.storageWAL / max(c.changes, 1) }

// roles lists the cluster's CPU per change by process role.
func (c *catchUpCost) roles() string {
	roles := slices.Sorted(maps.Keys(c.roleCPU))
	parts := make([]string, len(roles))
	for i, r := range roles {
		parts[i] = fmt.Sprintf("%s %s", r, c.perChange(c.roleCPU[r]).Round(100*time.Nanosecond))
	}
	return strings.Join(parts, ", ")
}

func (sr *streamRun) startChild(ctx context.Context) (*Child, error) {
	h := sr.opt.Harness
	return StartChild(ctx, h.childOptions(sr.cfg, "replication"))
}

// update commits opt.Updates single-row updates, opt.TxnRows per
// transaction, each todo's completed flag flipped.
func (sr *streamRun) update(ctx context.Context, run int) error {
	logf(sr.opt.Log, "run %d: committing %d updates…", run+1, sr.opt.Updates)
	for done := 0; done < sr.opt.Updates; done += sr.opt.TxnRows {
		n := min(sr.opt.TxnRows, sr.opt.Updates-done)
		if _, err := sr.src.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = ANY($1::uuid[])`, sr.take(n)); err != nil {
			return fmt.Errorf("update todos: %w", err)
		}
	}
	return nil
}

// take returns the next n todo ids, round robin.
func (sr *streamRun) take(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = sr.ids[sr.next%len(sr.ids)]
		sr.next++
	}
	return out
}

// catchUpRun is one timed catch-up by a syncpipe child.
type catchUpRun struct {
	Sample
	Child ChildStats
	// started is the child's "syncpipe starting" log line (storage open),
	// begin its START_REPLICATION, end when the checkpoint was seen.
	started, begin, end time.Time
	// pieces is what polling storage saw of a transaction written in
	// pieces (zero unless asked for).
	pieces pieceWatch
	// slotWAL is the WAL from the restart_lsn of syncpipe's slot to the
	// source's position at the start: what its walsender decodes.
	slotWAL int64
	// settle is how long the slot took to advance after the catch-up (see
	// settle; not part of the timing).
	settle time.Duration
}

// catchUp starts syncpipe on the WAL left by the updates (changes of them)
// and times it until a checkpoint covers the source's current position,
// adding what it cost to cost. With watch it also polls storage for the
// pieces of a transaction too large for one write.
func (sr *streamRun) catchUp(ctx context.Context, cost *catchUpCost, changes int64, watch bool) (catchUpRun, error) {
	var cu catchUpRun
	var ops0 int64
	if err := sr.storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.bucket_data`).Scan(&ops0); err != nil {
		return cu, fmt.Errorf("count ops: %w", err)
	}
	data := filepath.Join(sr.cluster.Dir(), "data")
	var wal0 int64
	if err := sr.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&wal0); err != nil {
		return cu, fmt.Errorf("read WAL position: %w", err)
	}
	var err error
	if cu.slotWAL, err = sr.groupSlotBehind(ctx); err != nil {
		return cu, err
	}
	stopWatch := func() (pieceWatch, error) { return pieceWatch{}, nil }
	if watch {
		if stopWatch, err = sr.watchPieces(ctx); err != nil {
			return cu, err
		}
	}
	cpu0, pg0, procs0 := readCPU(), clusterCPU(data), clusterProcs(data)
	child, err := sr.startChild(ctx)
	if err != nil {
		_, _ = stopWatch()
		return cu, err
	}
	cu.started, err = child.WaitFor(ctx, "syncpipe starting")
	if err == nil {
		cu.begin, err = child.WaitFor(ctx, "streaming from the replication slot")
	}
	if err == nil {
		cost.startups = append(cost.startups, cu.begin.Sub(cu.started))
		cu.end, err = sr.waitCaughtUp(ctx, child)
	}
	cpu1 := readCPU()
	pw, werr := stopWatch()
	cu.pieces = pw
	if err == nil {
		err = werr
	}
	if err == nil {
		// Before the child stops: its walsender and storage backends exit
		// with it, and the time of exited processes is no longer theirs.
		if cost.roleCPU == nil {
			cost.roleCPU = map[string]time.Duration{}
		}
		for role, d := range clusterProcs(data).since(procs0) {
			cost.roleCPU[role] += d
		}
		var wal1 int64
		if err := sr.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&wal1); err == nil {
			cost.storageWAL += wal1 - wal0
		}
		cost.changes += changes
	}
	st, stopErr := child.Stop()
	cu.Child = st
	if err != nil {
		return cu, err
	}
	if stopErr != nil {
		return cu, stopErr
	}
	cu.Sample = Sample{Duration: cu.end.Sub(cu.begin), Rows: changes, PeakRSS: st.PeakRSS, CPUBusy: busySince(cpu0, cpu1),
		OwnCPU: clusterCPU(data) - pg0 + st.User + st.System}
	if err := sr.storage.QueryRow(ctx, `SELECT count(*) - $1, coalesce(sum(octet_length(data)) FILTER (WHERE op_id > 0), 0)::bigint
		FROM syncpipe.bucket_data`, ops0).Scan(&cu.Ops, &cu.Bytes); err != nil {
		return cu, fmt.Errorf("count ops: %w", err)
	}
	// Untimed, uncounted: the next catch-up decodes its own WAL only.
	cu.settle, err = sr.settle(ctx)
	return cu, err
}

// waitCaughtUp waits until storage publishes a checkpoint at or past the
// source's current WAL insert position and returns when it saw it.
func (sr *streamRun) waitCaughtUp(ctx context.Context, child *Child) (time.Time, error) {
	var target string
	if err := sr.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		return time.Time{}, err
	}
	if _, err := sr.storage.Exec(ctx, "LISTEN syncpipe_checkpoints"); err != nil {
		return time.Time{}, err
	}
	defer sr.storage.Exec(context.WithoutCancel(ctx), "UNLISTEN *")
	for {
		var reached bool
		err := sr.storage.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false)
			FROM syncpipe.groups WHERE state = 'ACTIVE'`, target).Scan(&reached)
		if err != nil {
			return time.Time{}, fmt.Errorf("read checkpoint: %w", err)
		}
		if reached {
			return time.Now(), nil
		}
		// Bounded waits re-check the groups table: a checkpoint can move
		// only the LSN, and the child may have died.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = sr.storage.WaitForNotification(wctx)
		cancel()
		if err != nil && (ctx.Err() != nil || !pgconn.Timeout(err)) {
			return time.Time{}, fmt.Errorf("waiting for a checkpoint past %s: %w\n%s", target, err, child.Tail())
		}
		if childExited(child) {
			return time.Time{}, fmt.Errorf("syncpipe exited waiting for a checkpoint past %s:\n%s", target, child.Tail())
		}
	}
}

// checkpointNote is a storage checkpoint notification's payload.
type checkpointNote struct {
	Group      int   `json:"group_id"`
	Checkpoint int64 `json:"checkpoint"`
}

// percentile returns the q-quantile of ds (sorted in place).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}

func mustQuery(ctx context.Context, conn *pgx.Conn, q string) pgx.Rows {
	rows, _ := conn.Query(ctx, q) // an error surfaces through CollectRows
	return rows
}

// childExited reports whether the child process has ended.
func childExited(c *Child) bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}
