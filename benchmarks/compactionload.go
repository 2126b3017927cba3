package benchmarks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/torture"
)

// CompactionLoadOptions configures P8's concurrent half (issue 19):
// compaction running while changes stream in and clients sync.
type CompactionLoadOptions struct {
	// Load sizes the clients, the buckets, the change rate and each
	// phase's length (For); Load.Harness runs syncpipe.
	Load LoadOptions
	// Backlog rounds, before every phase, update every todo once each in
	// a transaction per round: superseded ops for compaction to rewrite.
	Backlog int
	// Phases alternate without and with compaction (off, on, off, on, …),
	// so that both see the same machine, storage size and backlog; at
	// least 2.
	Phases int
}

// CompactionLoadPreset is issue 19's setting: 20 syncing clients and
// 2,000 changes/s, phases of a minute ("full") or 15 s ("small").
func CompactionLoadPreset(scale string) CompactionLoadOptions {
	o := CompactionLoadOptions{Load: LoadOptions{Clients: 20, ListsPerUser: 50, TodosPerList: 5, Rate: 2000, TxnRows: 100, For: time.Minute},
		Backlog: 50, Phases: 4}
	if scale == "small" {
		o.Load.ListsPerUser, o.Load.For, o.Backlog, o.Phases = 10, 15*time.Second, 20, 2
	}
	return o
}

// compactionLagBar: replication lag p99 with compaction running is within
// 20 % of the lag without it (issue 19).
const compactionLagBar = 1.20

// compactionPhase is what one phase measured.
type compactionPhase struct {
	compacting bool
	fig        loadFigures
	passes     int           // completed `syncpipe compact` runs
	compactCPU time.Duration // their CPU
	moved      int64         // MOVE ops in storage: growth during the phase
	clears     int64         // CLEAR ops in storage: growth during the phase
	ops        int64         // ops in storage at the phase's end
}

// RunCompactionLoad measures replication lag and client checksums while
// compaction runs (issue 19: "compaction running concurrently with 2,000
// changes/s and 20 syncing clients: no checksum failure, replication lag
// p99 unchanged within 20 %"). One `syncpipe run --role all` child
// replicates and serves; Load.Clients clients follow their streams
// (latency) and as many checking clients validate every checkpoint's
// checksums (internal/testkit/torture.Client). Phases of Load.For alternate: in
// every other one the harness runs `syncpipe compact` against the same
// storage, over and over, as an operator would.
func RunCompactionLoad(ctx context.Context, opt CompactionLoadOptions) (Result, error) {
	res, _, err := runCompactionLoad(ctx, opt)
	return res, err
}

func runCompactionLoad(ctx context.Context, opt CompactionLoadOptions) (Result, []compactionPhase, error) {
	lo := opt.Load
	lo.Replication = "{workers_per_process: 2, compaction: {interval: 0s}}"
	opt.Phases = max(opt.Phases, 2)
	res := Result{Scenario: "compaction-load", Date: time.Now(),
		Params: fmt.Sprintf("P8, compaction under load: %d clients (each its own user with %d buckets of %d todos) follow their sync streams and %d more validate every checkpoint's checksums; "+
			"%d changes/s in %d-row transactions of single-row UPDATEs for %s per phase; before each phase %d rounds update every todo once (superseded ops); phases alternate without and with "+
			"`syncpipe compact` running in a loop against the same storage; one `syncpipe run --role all` child, source and storage on two clusters. Replication lag: commit → the checkpoint published in storage",
			lo.Clients, lo.ListsPerUser, lo.TodosPerList, lo.Clients, lo.Rate, lo.TxnRows, lo.For, opt.Backlog)}
	e, err := startLoadEnv(ctx, lo)
	if err != nil {
		return res, nil, err
	}
	defer e.close(ctx)
	lc := newLoadClients(e.users, false)
	checkers, err := startCheckers(e)
	if err != nil {
		return res, nil, err
	}
	cctx, stopClients := context.WithCancel(ctx)
	var clients sync.WaitGroup
	defer func() { stopClients(); clients.Wait() }()
	for _, c := range lc.list {
		clients.Go(func() { lc.run(cctx, e.url, c) })
	}
	for _, c := range checkers {
		clients.Go(func() { c.Run(cctx) })
	}
	if err := waitUntil(ctx, 5*time.Minute, func() bool { return lc.synced.Load() >= int64(lo.Clients) }); err != nil {
		return res, nil, fmt.Errorf("first sync: %d of %d clients: %w\n%s", lc.synced.Load(), lo.Clients, err, e.child.Tail())
	}
	var phases []compactionPhase
	seq := int64(1)
	for i := range opt.Phases {
		logf(lo.Log, "compaction-load: phase %d of %d, compaction %v: %d backlog rounds…", i+1, opt.Phases, i%2 == 1, opt.Backlog)
		ph, err := runCompactionPhase(ctx, e, lc, checkers, opt, i%2 == 1, seq)
		if err != nil {
			return res, phases, err
		}
		seq += int64(ph.fig.txns)
		phases = append(phases, ph)
	}
	var failures []string
	for _, c := range checkers {
		failures = append(failures, c.Violations()...)
	}
	stopClients()
	clients.Wait()
	st, err := e.child.Stop()
	e.child = nil
	if err != nil {
		return res, phases, err
	}
	res.PeakRSS = st.PeakRSS
	compactionLoadReport(&res, phases, checkers, failures, lc.failed.Load())
	return res, phases, nil
}

// startCheckers makes a checking client per user of e.
func startCheckers(e *loadEnv) ([]*torture.Client, error) {
	addr := strings.TrimPrefix(e.url, "http://")
	var out []*torture.Client
	for _, u := range e.users {
		tok, err := p5Token(u)
		if err != nil {
			return nil, err
		}
		out = append(out, torture.NewClient("check-"+u, addr, tok))
	}
	return out, nil
}

// runCompactionPhase updates every todo opt.Backlog times (untimed, until
// storage and the checking clients are past it), then commits the load for opt.Load.For with
// compaction running or not, waits until every client holds the source and
// measures the phase's latencies.
func runCompactionPhase(ctx context.Context, e *loadEnv, lc *loadClients, checkers []*torture.Client, opt CompactionLoadOptions, compacting bool, firstSeq int64) (compactionPhase, error) {
	ph := compactionPhase{compacting: compacting}
	for r := range opt.Backlog {
		if _, err := e.src.Exec(ctx, `UPDATE todos SET description = 'round ' || $1::int || ' of ' || id`, r); err != nil {
			return ph, fmt.Errorf("backlog round %d: %w", r, err)
		}
	}
	var fig loadFigures
	if err := caughtUp(ctx, e, checkers); err != nil {
		return ph, fmt.Errorf("after the backlog: %w\n%s", err, e.child.Tail())
	}
	lc.forgetArrivals()
	moved0, clears0, _, err := opCounts(ctx, e.storage.URI("storage"))
	if err != nil {
		return ph, err
	}
	pub, err := watchPublished(ctx, e.storage.URI("storage"))
	if err != nil {
		return ph, err
	}
	defer pub.stop()
	cpu0 := sampleLoadCPU(e.child, e.cluster, e.storage)
	pctx, stopCompacting := context.WithCancel(ctx)
	compacted := make(chan compactLoop, 1)
	go func() {
		if !compacting {
			compacted <- compactLoop{}
			return
		}
		compacted <- compactRepeatedly(pctx, e.child.Binary(), e.child.ConfigPath())
	}()
	committed, err := loadChanges(ctx, e.src, opt.Load, e.owners, &fig, firstSeq)
	stopCompacting()
	loop := <-compacted
	if err != nil {
		return ph, err
	}
	if loop.err != nil {
		return ph, loop.err
	}
	fig.cpu = sampleLoadCPU(e.child, e.cluster, e.storage).since(cpu0)
	if err := loadVerify(ctx, e.src, lc, &fig); err != nil {
		return ph, fmt.Errorf("%w\n%s", err, e.child.Tail())
	}
	published, err := pub.stop()
	if err != nil {
		return ph, err
	}
	fig.lat, fig.ops = lc.latencies(committed, published)
	ph.fig, ph.passes, ph.compactCPU = fig, loop.passes, loop.cpu
	moved1, clears1, ops, err := opCounts(ctx, e.storage.URI("storage"))
	ph.moved, ph.clears, ph.ops = moved1-moved0, clears1-clears0, ops
	return ph, err
}

// caughtUp waits until storage has published a checkpoint past the
// source's current WAL position and every checking client has completed
// it: a phase must not measure the lag of a backlog still streaming.
func caughtUp(ctx context.Context, e *loadEnv, checkers []*torture.Client) error {
	var lsn string // the insert position: see streamRounds
	if err := e.src.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return fmt.Errorf("read the source position: %w", err)
	}
	conn, err := pgx.Connect(ctx, e.storage.URI("storage"))
	if err != nil {
		return fmt.Errorf("connect to storage: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var cp int64
	published := func() bool {
		err := conn.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint) FILTER (WHERE last_checkpoint_lsn >= $1::pg_lsn), 0)
			FROM syncpipe.groups WHERE state = 'ACTIVE'`, lsn).Scan(&cp)
		return err == nil && cp > 0
	}
	if err := waitUntil(ctx, 5*time.Minute, published); err != nil {
		return fmt.Errorf("no checkpoint past %s: %w", lsn, err)
	}
	completed := func() bool {
		for _, c := range checkers {
			if st, ok := c.Snapshot(); !ok || st.Checkpoint < cp {
				return false
			}
		}
		return true
	}
	if err := waitUntil(ctx, 5*time.Minute, completed); err != nil {
		return fmt.Errorf("checking clients not at checkpoint %d: %w", cp, err)
	}
	return nil
}

// compactLoop is what compactRepeatedly did.
type compactLoop struct {
	passes int
	cpu    time.Duration
	err    error
}

// compactRepeatedly runs `syncpipe compact --config cfg` again and again
// until ctx ends, then interrupts the one running (compaction stops
// between transactions and keeps what it did).
func compactRepeatedly(ctx context.Context, bin, cfg string) compactLoop {
	var l compactLoop
	for ctx.Err() == nil {
		cmd := exec.CommandContext(ctx, bin, "compact", "--config", cfg)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState != nil {
			l.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		switch {
		case err == nil:
			l.passes++
		case ctx.Err() == nil:
			l.err = fmt.Errorf("syncpipe compact: %w\n%s", err, out)
			return l
		}
	}
	return l
}

// opCounts counts storage's MOVE and CLEAR ops and all its ops.
func opCounts(ctx context.Context, uri string) (moved, clears, ops int64, err error) {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("connect to storage: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rel, err := opsRelation(ctx, conn)
	if err != nil {
		return 0, 0, 0, err
	}
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE op = 3), count(*) FILTER (WHERE op = 4), count(*) FROM `+rel).Scan(&moved, &clears, &ops)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("count ops: %w", err)
	}
	return moved, clears, ops, nil
}

// compactionLoadReport renders the phases into res: a row per phase kind,
// a table per phase, and the bar.
func compactionLoadReport(res *Result, phases []compactionPhase, checkers []*torture.Client, failures []string, streamErrors int64) {
	name := func(on bool) string {
		if on {
			return "compaction running"
		}
		return "no compaction"
	}
	var p99 [2][]time.Duration // without, with compaction
	for k, on := range []bool{false, true} {
		row := Row{Name: name(on)}
		if on {
			row.Baseline = name(false)
		}
		for _, ph := range phases {
			if ph.compacting == on {
				row.Samples = append(row.Samples, Sample{Duration: ph.fig.elapsed, Rows: ph.fig.committed, Ops: ph.fig.ops, OwnCPU: ph.fig.cpu.syncpipe})
				p99[k] = append(p99[k], p5LatencyOf(ph.fig.lat.replication).p99)
			}
		}
		res.Rows = append(res.Rows, row)
	}
	res.Notes = append(res.Notes, compactionPhaseTable(phases))
	var completes int
	for _, c := range checkers {
		n, _, _ := c.Stats()
		completes += n
	}
	off, on := medianDuration(p99[0]), medianDuration(p99[1])
	ratio := float64(on) / float64(max(off, 1))
	res.Bars = append(res.Bars, Bar{ID: "P8", Measure: "compaction under 2,000 changes/s and 20 syncing clients",
		Bar: "no checksum failure; replication lag p99 with compaction ≤ 120 % of without (median of the phases)",
		Value: fmt.Sprintf("p99 %s with compaction vs %s without = %.0f %%; %d checksum failures in %d checkpoints the checking clients completed; %d stream errors",
			on, off, 100*ratio, len(failures), completes, streamErrors),
		Met: len(failures) == 0 && streamErrors == 0 && completes > 0 && off > 0 && ratio <= compactionLagBar})
	if len(failures) > 0 {
		res.Notes = append(res.Notes, "Checksum failures: "+strings.Join(failures[:min(len(failures), 5)], "; "))
	}
}

// compactionPhaseTable renders one line per phase.
func compactionPhaseTable(phases []compactionPhase) string {
	var b strings.Builder
	b.WriteString("| phase | compaction | changes/s | replication lag p50 / p99 / max | commit → checkpoint_complete p50 / p99 | compact passes | MOVEs / CLEARs added | ops in storage after | CPU cores: syncpipe / storage / compact |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, ph := range phases {
		f := ph.fig
		rep, tot := p5LatencyOf(f.lat.replication), p5LatencyOf(f.lat.total)
		cores := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()/f.elapsed.Seconds()) }
		fmt.Fprintf(&b, "| %d | %v | %.0f | %s / %s / %s | %s / %s | %d | %d / %d | %d | %s / %s / %s |\n",
			i+1, ph.compacting, float64(f.committed)/f.elapsed.Seconds(), rep.p50, rep.p99, rep.max, tot.p50, tot.p99,
			ph.passes, ph.moved, ph.clears, ph.ops, cores(f.cpu.syncpipe), cores(f.cpu.storage), cores(ph.compactCPU))
	}
	b.WriteString("\nMOVEs / CLEARs added: the change of storage's MOVE and CLEAR op counts over the phase (a CLEAR merges MOVEs, so MOVEs can shrink).")
	return b.String()
}

// medianDuration is the median of v (0 when empty).
func medianDuration(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}
