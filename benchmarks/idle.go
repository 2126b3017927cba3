package benchmarks

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// IdleOptions configures P0 (issue 40): what a caught-up syncpipe costs
// when the source does (almost) nothing.
type IdleOptions struct {
	Todos, Lists int
	// Window is how long each phase is measured.
	Window time.Duration
	// Topologies are where storage is (TwoClusters and/or OneCluster, see
	// ParseTopologies); empty is both.
	Topologies []string
	Log        io.Writer
	Harness    *Harness
}

// The phases of P0, measured in this order on every target.
const (
	idlePhaseIdle  = "idle"
	idlePhaseWrite = "one write a second"
)

// P0 bars (issue 40: "Idle is idle").
const (
	// idleCommitBar is the most storage write transactions per second an
	// idle syncpipe may cause, on average over the idle phase.
	idleCommitBar = 1.0
	// idleCPUBar is the most CPU an idle syncpipe may use, in cores.
	idleCPUBar = 0.05
)

// runIdleScenario: P0 on the todo data set (small: 10k todos / 100
// lists, 10 s phases; full: the SPEC §9 1M / 1k, 60 s phases), both
// topologies unless -topology picks one; -for sets a phase's length.
func runIdleScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	return RunIdle(ctx, IdleOptions{
		Todos:      pick(p.Rows, 10_000, 1_000_000, p.Scale),
		Lists:      pick(p.Lists, 100, 1000, p.Scale),
		Window:     pick(p.For, 10*time.Second, time.Minute, p.Scale),
		Topologies: p.Topologies, Log: p.Log, Harness: p.Harness})
}

// idleTarget is one syncpipe configuration P0 measures: a topology and a
// binary (Harness.variants), with a storage database and slots of its own
// on the shared source.
type idleTarget struct {
	topology, suffix string
	h                *Harness
	// storageCluster holds the storage database: the source's own cluster
	// for OneCluster.
	storageCluster *pgcluster.Cluster
	storageDB      string
	slotPrefix     string
	cfg            string
	storage        *pgx.Conn // the storage database
	// mon is a connection to the storage cluster's postgres database: the
	// counters are read there, so reading them adds no transaction to the
	// storage database's own statistics.
	mon    *pgx.Conn
	phases []idlePhase
}

func (t *idleTarget) label() string { return topologyLabel(t.topology) + t.suffix }

func (t *idleTarget) twoClusters() bool { return t.topology == TwoClusters }

// idlePhase is what one phase of one target measured.
type idlePhase struct {
	name    string
	elapsed time.Duration
	// writes are the one-row UPDATEs the harness committed on the source.
	writes int
	// CPU time of the syncpipe child, of the storage database's backends
	// and of the source cluster's walsenders.
	syncpipe, storageBackends, walsender time.Duration
	// machine is the machine's busy share (neighbours included).
	machine float64
	// xids are the transaction ids the storage cluster assigned — one per
	// transaction that wrote — less the harness's own writes when the
	// source shares that cluster: storage's write commits. srcXids are the
	// source cluster's, the harness's writes included.
	xids, srcXids int64
	// commits is the advance of pg_stat_database.xact_commit of the
	// storage database: every transaction, read-only ones too.
	commits int64
	// storageWAL and sourceWAL are the WAL each cluster wrote (the same
	// for one cluster).
	storageWAL, sourceWAL int64
	// slotStart and slotEnd are the target's slot's confirmed_flush_lsn at
	// the phase's start and end (bytes); slotBehind is how far it was
	// behind the source's insert position at the end. syncpipe confirms a
	// position every replication.stream.status_interval (10 s), so a phase
	// shorter than that may see no advance.
	slotStart, slotEnd, slotBehind int64
	peakRSS                        int64
}

func (ph idlePhase) cores(d time.Duration) float64 {
	return d.Seconds() / max(ph.elapsed, time.Nanosecond).Seconds()
}

func (ph idlePhase) perSecond(n int64) float64 {
	return float64(n) / max(ph.elapsed, time.Nanosecond).Seconds()
}

// idleRun holds what the targets of a P0 run share.
type idleRun struct {
	opt     IdleOptions
	cluster *pgcluster.Cluster // the source's (and one-cluster storage's)
	src     *pgx.Conn          // the source database
	srcMon  *pgx.Conn          // the source cluster's postgres database
	ids     []string           // todos the write phase updates, round robin
	next    int
}

// RunIdle measures P0 (issue 40): after the initial snapshot, with a
// `syncpipe run --role replication` child caught up, two phases of
// opt.Window each — no source change at all, then a one-row UPDATE a
// second — in each topology. Before each phase the machine is quieted:
// VACUUM ANALYZE of the source and storage (the snapshot's autovacuum),
// a CHECKPOINT of each cluster, and syncpipe caught up past them. Per
// phase: syncpipe's CPU, storage backends' and the walsender's, storage
// write transactions (xids assigned in the storage cluster), the storage
// database's commits (read-only included), WAL of each cluster and the
// slot's confirmed_flush_lsn. Targets run one after the other, each with
// its own storage database and slot; a comparison run (Harness.Compare)
// measures both binaries in each topology, in turn (new first in the
// first topology, old first in the next).
func RunIdle(ctx context.Context, opt IdleOptions) (Result, error) {
	res, _, err := runIdle(ctx, opt)
	return res, err
}

// runIdle is RunIdle, also returning the measured targets.
func runIdle(ctx context.Context, opt IdleOptions) (res Result, targets []*idleTarget, err error) {
	topologies := slices.Clone(opt.Topologies)
	if len(topologies) == 0 {
		topologies, _ = ParseTopologies("both")
	}
	// Two clusters first, as in P3: a one-cluster target writes storage's
	// WAL into the source's cluster, and its checkpoints and the WAL its
	// inactive slot holds would weigh on whatever is measured there after.
	slices.SortStableFunc(topologies, func(a, b string) int {
		return boolInt(a != TwoClusters) - boolInt(b != TwoClusters)
	})
	topologies = slices.Compact(topologies)
	var labels []string
	for _, t := range topologies {
		labels = append(labels, topologyLabel(t))
	}
	res = Result{Scenario: "idle", Date: time.Now(), Params: fmt.Sprintf("P0 (issue 40): %d todos / %d lists; after the initial snapshot and catch-up of a `syncpipe run --role replication` child, two phases of %s each: "+
		"%s (no source change) and %s (a one-row UPDATE a second); before each, VACUUM ANALYZE of source and storage, a CHECKPOINT of each cluster and syncpipe caught up past it; topologies, one after the other: %s (fsync on), storage synchronous_commit=off. "+
		"In the table, rows/s = storage write transactions per second (xids the storage cluster assigned, the harness's own writes taken out), MiB/s = the storage cluster's WAL",
		opt.Todos, opt.Lists, opt.Window, idlePhaseIdle, idlePhaseWrite, strings.Join(labels, " and "))}
	res.Params += opt.Harness.compareParams()
	if opt.Harness == nil {
		return res, nil, fmt.Errorf("idle scenario: no syncpipe harness")
	}
	cluster, src, err := startTodos(ctx, opt.Log, todos.Size{Lists: opt.Lists, Todos: opt.Todos, Seed: 42})
	if err != nil {
		return res, nil, err
	}
	defer cluster.Stop()
	defer src.Close(context.WithoutCancel(ctx))
	ir := &idleRun{opt: opt, cluster: cluster, src: src}
	if ir.srcMon, err = pgx.Connect(ctx, cluster.URI("postgres")); err != nil {
		return res, nil, fmt.Errorf("connect to the source cluster: %w", err)
	}
	defer ir.srcMon.Close(context.WithoutCancel(ctx))
	if ir.ids, err = pgx.CollectRows(mustQuery(ctx, src, `SELECT id::text FROM todos ORDER BY id LIMIT 1000`), pgx.RowTo[string]); err != nil {
		return res, nil, fmt.Errorf("read todo ids: %w", err)
	}
	var storageCluster *pgcluster.Cluster
	for ti, topo := range topologies {
		sc := cluster
		if topo == TwoClusters {
			logf(opt.Log, "starting the storage cluster…")
			if storageCluster, err = pgcluster.Start(ctx, pgcluster.Options{Durable: true}); err != nil {
				return res, nil, err
			}
			defer storageCluster.Stop()
			sc = storageCluster
		}
		// A comparison run: the binaries in turn, new first in the first
		// topology, old first in the next (A B, B A).
		for _, v := range interleaved(opt.Harness.variants(), ti) {
			t, err := ir.newTarget(ctx, topo, v, sc, len(targets))
			if err != nil {
				return res, targets, err
			}
			defer t.close(context.WithoutCancel(ctx))
			targets = append(targets, t)
		}
	}
	for _, t := range targets {
		if err := ir.measure(ctx, t); err != nil {
			return res, targets, err
		}
	}
	idleReport(&res, targets, opt.Window)
	return res, targets, nil
}

// newTarget creates the storage database of the i-th target and its
// connections.
func (ir *idleRun) newTarget(ctx context.Context, topo string, v variant, sc *pgcluster.Cluster, i int) (*idleTarget, error) {
	t := &idleTarget{topology: topo, suffix: v.suffix, h: v.h, storageCluster: sc,
		storageDB: fmt.Sprintf("storage_%d", i), slotPrefix: fmt.Sprintf("idle%d_", i)}
	if err := sc.CreateDatabase(ctx, t.storageDB); err != nil {
		return nil, err
	}
	t.cfg = v.h.config(SnapshotConfig{Source: ir.cluster.URI("app"), Storage: sc.URI(t.storageDB),
		SlotPrefix: t.slotPrefix, Rules: todos.Rules, Workers: 2, ChunkRows: 10000})
	var err error
	if t.storage, err = pgx.Connect(ctx, sc.URI(t.storageDB)); err != nil {
		return nil, fmt.Errorf("connect to storage: %w", err)
	}
	if t.mon, err = pgx.Connect(ctx, sc.URI("postgres")); err != nil {
		t.storage.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("connect to the storage cluster: %w", err)
	}
	return t, nil
}

func (t *idleTarget) close(ctx context.Context) {
	t.storage.Close(ctx)
	t.mon.Close(ctx)
}

// measure runs t's child through the snapshot and catch-up, then both
// phases, and stops it.
func (ir *idleRun) measure(ctx context.Context, t *idleTarget) error {
	logf(ir.opt.Log, "idle, %s: initial snapshot…", t.label())
	child, err := StartChild(ctx, t.h.childOptions(t.cfg, "replication"))
	if err != nil {
		return err
	}
	defer child.Kill() // on an error path; a no-op once stopped
	if _, err := child.WaitFor(ctx, "snapshot done"); err != nil {
		return err
	}
	for _, name := range []string{idlePhaseIdle, idlePhaseWrite} {
		if err := ir.quiet(ctx, t, child); err != nil {
			return err
		}
		ph, err := ir.phase(ctx, t, child, name)
		if err != nil {
			return err
		}
		logf(ir.opt.Log, "idle, %s, %s: syncpipe %.1f%% of a core, storage %.1f write commits/s, storage WAL %.1f KB/s, slot advanced %s",
			t.label(), name, 100*ph.cores(ph.syncpipe), ph.perSecond(ph.xids), ph.perSecond(ph.storageWAL)/1e3, fmtKB(ph.slotEnd-ph.slotStart))
		t.phases = append(t.phases, ph)
	}
	st, err := child.Stop()
	if err != nil {
		return err
	}
	for i := range t.phases {
		t.phases[i].peakRSS = st.PeakRSS
	}
	return nil
}

// quiet does by hand, untimed, what would otherwise land in a phase: the
// autovacuum of the snapshot's rows (VACUUM ANALYZE of the source and of
// t's storage) and the checkpoint of what they wrote, then waits until t's
// storage has published a checkpoint past all of it.
func (ir *idleRun) quiet(ctx context.Context, t *idleTarget, child *Child) error {
	for _, c := range []*pgx.Conn{ir.src, t.storage} {
		if _, err := c.Exec(ctx, "VACUUM ANALYZE"); err != nil {
			return fmt.Errorf("quiet before a phase: vacuum: %w", err)
		}
	}
	mons := []*pgx.Conn{ir.srcMon}
	if t.twoClusters() {
		mons = append(mons, t.mon)
	}
	for _, c := range mons {
		if _, err := c.Exec(ctx, "CHECKPOINT"); err != nil {
			return fmt.Errorf("quiet before a phase: checkpoint: %w", err)
		}
	}
	var lsn string
	if err := ir.srcMon.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return fmt.Errorf("read the source position: %w", err)
	}
	var reached bool
	err := waitUntil(ctx, 2*time.Minute, func() bool {
		err := t.storage.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false)
			FROM syncpipe.groups WHERE state = 'ACTIVE'`, lsn).Scan(&reached)
		return (err == nil && reached) || childExited(child)
	})
	if err == nil && !reached {
		err = fmt.Errorf("syncpipe exited")
	}
	if err != nil {
		return fmt.Errorf("idle, %s: no checkpoint past %s: %w\n%s", t.label(), lsn, err, child.Tail())
	}
	// The polls above are transactions of the storage database, whose
	// statistics an idle backend reports up to 10 s late: now, so that
	// they do not land in the phase's xact_commit.
	if _, err := t.storage.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return fmt.Errorf("flush the harness's statistics: %w", err)
	}
	return nil
}

// idleSample is the counters a phase is the difference of.
type idleSample struct {
	at                         time.Time
	syncpipe                   time.Duration
	src, sto                   procCPU
	machine                    cpuTimes
	xid, srcXid, commits       int64
	storageWAL, sourceWAL, lsn int64
}

// sample reads the counters of t's phase: CPU from /proc, the rest from
// the clusters' postgres databases (queries that assign no xid).
func (ir *idleRun) sample(ctx context.Context, t *idleTarget, child *Child) (idleSample, error) {
	s := idleSample{at: time.Now(), syncpipe: child.CPU(), machine: readCPU(),
		src: clusterProcs(filepath.Join(ir.cluster.Dir(), "data"))}
	if t.twoClusters() {
		s.sto = clusterProcs(filepath.Join(t.storageCluster.Dir(), "data"))
	}
	const counters = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, (pg_current_wal_insert_lsn() - '0/0')::bigint,
		coalesce((SELECT xact_commit FROM pg_stat_database WHERE datname = $1), 0)`
	if err := t.mon.QueryRow(ctx, counters, t.storageDB).Scan(&s.xid, &s.storageWAL, &s.commits); err != nil {
		return s, fmt.Errorf("read the storage cluster's counters: %w", err)
	}
	err := ir.srcMon.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, (pg_current_wal_insert_lsn() - '0/0')::bigint,
		coalesce((SELECT max(confirmed_flush_lsn) - '0/0' FROM pg_replication_slots WHERE starts_with(slot_name, $1)), 0)::bigint`,
		t.slotPrefix).Scan(&s.srcXid, &s.sourceWAL, &s.lsn)
	if err != nil {
		return s, fmt.Errorf("read the source cluster's counters: %w", err)
	}
	if s.lsn == 0 {
		return s, fmt.Errorf("idle, %s: no slot %s* with a confirmed_flush_lsn on the source", t.label(), t.slotPrefix)
	}
	return s, nil
}

// phase measures one phase of t: opt.Window of nothing, or of a one-row
// UPDATE a second.
func (ir *idleRun) phase(ctx context.Context, t *idleTarget, child *Child, name string) (idlePhase, error) {
	ph := idlePhase{name: name}
	s0, err := ir.sample(ctx, t, child)
	if err != nil {
		return ph, err
	}
	ph.writes, err = ir.wait(ctx, child, name == idlePhaseWrite)
	if err != nil {
		return ph, err
	}
	s1, err := ir.sample(ctx, t, child)
	if err != nil {
		return ph, err
	}
	ph.elapsed, ph.syncpipe, ph.machine = s1.at.Sub(s0.at), s1.syncpipe-s0.syncpipe, busySince(s0.machine, s1.machine)
	src := s1.src.since(s0.src)
	ph.walsender = src["walsender"]
	ph.storageBackends = src["backend "+t.storageDB]
	if t.twoClusters() {
		ph.storageBackends = s1.sto.since(s0.sto)["backend "+t.storageDB]
	}
	ph.xids, ph.srcXids, ph.commits = s1.xid-s0.xid, s1.srcXid-s0.srcXid, s1.commits-s0.commits
	if !t.twoClusters() {
		ph.xids -= int64(ph.writes) // the harness's, in the same cluster
	}
	ph.storageWAL, ph.sourceWAL = s1.storageWAL-s0.storageWAL, s1.sourceWAL-s0.sourceWAL
	ph.slotStart, ph.slotEnd, ph.slotBehind = s0.lsn, s1.lsn, s1.sourceWAL-s1.lsn
	return ph, nil
}

// wait lets opt.Window pass, committing a one-row UPDATE on the source
// every second when writing, and returns the updates committed. It fails
// when the child exits meanwhile.
func (ir *idleRun) wait(ctx context.Context, child *Child, writing bool) (int, error) {
	end := time.After(ir.opt.Window)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	writes := 0
	for {
		select {
		case <-end:
			return writes, nil
		case <-ctx.Done():
			return writes, ctx.Err()
		case <-child.exited:
			return writes, fmt.Errorf("syncpipe exited during the phase:\n%s", child.Tail())
		case <-tick.C:
			if !writing {
				continue
			}
			id := ir.ids[ir.next%len(ir.ids)]
			ir.next++
			if _, err := ir.src.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = $1::uuid`, id); err != nil {
				return writes, fmt.Errorf("update a todo: %w", err)
			}
			writes++
		}
	}
}

// fmtKB renders a byte count in kB.
func fmtKB(n int64) string { return fmt.Sprintf("%.1f kB", float64(n)/1e3) }

// idleReport renders the targets' phases into res: a row per target and
// phase (storage write commits and storage WAL in the standard columns),
// the table of every figure, how commits are counted, and the P0 bars.
func idleReport(res *Result, targets []*idleTarget, window time.Duration) {
	var b strings.Builder
	b.WriteString("Per topology and phase (CPU in % of one core over the phase; commits and WAL per second):\n\n")
	b.WriteString("| configuration | phase | length | source writes | syncpipe CPU | storage backends CPU | walsender CPU | machine busy | storage write commits/s | storage database commits/s, read-only included | storage WAL | source WAL | slot confirmed_flush_lsn advance | slot behind the source at the end |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	pct := func(ph idlePhase, d time.Duration) string { return fmt.Sprintf("%.1f %%", 100*ph.cores(d)) }
	for _, t := range targets {
		for _, ph := range t.phases {
			res.Rows = append(res.Rows, Row{Name: ph.name + ", " + t.label(), Samples: []Sample{{Duration: ph.elapsed, Rows: ph.xids, Bytes: ph.storageWAL,
				PeakRSS: ph.peakRSS, CPUBusy: ph.machine, OwnCPU: ph.syncpipe + ph.storageBackends + ph.walsender}}})
			res.PeakRSS = max(res.PeakRSS, ph.peakRSS)
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %.0f %% | %.2f | %.2f | %.1f kB/s | %.1f kB/s | %s | %s |\n",
				t.label(), ph.name, ph.elapsed.Round(time.Millisecond), ph.writes, pct(ph, ph.syncpipe), pct(ph, ph.storageBackends), pct(ph, ph.walsender),
				100*ph.machine, ph.perSecond(ph.xids), ph.perSecond(ph.commits), ph.perSecond(ph.storageWAL)/1e3, ph.perSecond(ph.sourceWAL)/1e3,
				fmtKB(ph.slotEnd-ph.slotStart), fmtKB(ph.slotBehind))
		}
	}
	res.Notes = append(res.Notes, strings.TrimRight(b.String(), "\n"),
		"How storage commits are counted: **storage write commits** are the transaction ids the storage cluster assigned during the phase "+
			"(the advance of `pg_snapshot_xmax(pg_current_snapshot())`, read from its postgres database, which assigns none): PostgreSQL gives an xid only to a transaction that writes, "+
			"so read-only transactions (syncpipe's polls, the harness's reads) are not counted, and every committed write is. It is cluster-wide: with one cluster the harness's own UPDATEs "+
			"(one xid each) are taken out, and any other writer of the cluster (autovacuum's ANALYZE, which writes pg_statistic) would count too — the phases are quieted first so that none runs. "+
			"**Storage database commits** are the advance of `pg_stat_database.xact_commit` of the storage database: every transaction, read-only ones included, and backends report it "+
			"up to 10 s late when idle, so it is shown beside, not judged. CPU: the syncpipe child's utime + stime and each Postgres process's from `/proc/<pid>/stat` "+
			"(storage backends: the storage database's; walsender: the source cluster's walsenders, only this target's runs). WAL: the advance of `pg_current_wal_insert_lsn()` of each cluster "+
			"(one cluster: the same figure, the source's writes included). The slot: `max(confirmed_flush_lsn)` of the target's slots on the source.")
	if n := compareNote(res.Rows, "storage write commits/s"); n != "" {
		res.Notes = append(res.Notes, n)
	}
	res.Bars = idleBars(targets, window)
}

// idleBars are the P0 bars, judged on the targets of the binary under
// test (an old build's figures are listed beside): in the idle phase of
// every topology storage commits ≤ 1/s and syncpipe's CPU < 5 % of a
// core; the slot's confirmed_flush_lsn advanced from the first phase's
// start to the last one's end, which holds source writes to confirm (the
// write phase's) and spans more than one status interval, where a single
// phase may not.
func idleBars(targets []*idleTarget, window time.Duration) []Bar {
	var commits, cpu, slot []string
	commitsMet, cpuMet, slotMet := true, true, true
	for _, t := range targets {
		judged := t.suffix == ""
		for _, ph := range t.phases {
			if ph.name == idlePhaseIdle {
				c, u := ph.perSecond(ph.xids), ph.cores(ph.syncpipe)
				commits = append(commits, fmt.Sprintf("%s: %.2f/s", t.label(), c))
				cpu = append(cpu, fmt.Sprintf("%s: %.1f %%", t.label(), 100*u))
				commitsMet = commitsMet && (!judged || c <= idleCommitBar)
				cpuMet = cpuMet && (!judged || u < idleCPUBar)
			}
		}
		if n := len(t.phases); n > 0 {
			first, last := t.phases[0], t.phases[n-1]
			adv := last.slotEnd - first.slotStart
			slot = append(slot, fmt.Sprintf("%s: %s, %s behind the source at the end", t.label(), fmtKB(adv), fmtKB(last.slotBehind)))
			slotMet = slotMet && (!judged || adv > 0)
		}
	}
	measured := len(targets) > 0
	return []Bar{
		{ID: "P0", Measure: fmt.Sprintf("idle storage commits by syncpipe (%s, no source change)", window), Bar: "≤ 1/s on average, each topology",
			Value: strings.Join(commits, "; "), Met: measured && commitsMet},
		{ID: "P0", Measure: "the slot's confirmed_flush_lsn over both phases", Bar: "advances, each topology",
			Value: strings.Join(slot, "; "), Met: measured && slotMet},
		{ID: "P0", Measure: "idle CPU of the syncpipe process", Bar: "< 5 % of a core, each topology",
			Value: strings.Join(cpu, "; "), Met: measured && cpuMet},
	}
}
