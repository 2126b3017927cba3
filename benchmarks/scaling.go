package benchmarks

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
)

// ScalingOptions configures the P2 snapshot scaling scenario.
type ScalingOptions struct {
	Tables, RowsPerTable int
	Owners               int // distinct owner_id values = by_owner buckets
	// Configs are the configurations every run measures, one after the
	// other on fresh storage databases, in this order in odd runs and in
	// reverse in even ones (P2: 1 process × 1 and × 2 workers, 2 and 3
	// processes × 1 worker).
	Configs   []ScalingConfig
	ChunkRows int
	Runs      int
	// StopAt is the share of rows committed when the resume check stops
	// the first process, and when the takeover check kills one (default
	// 0.4).
	StopAt float64
	// Takeovers are the SIGKILL takeover checks run after the measured
	// runs, 3 processes × 1 worker each: one per lease setting.
	Takeovers []LeaseSetting
	Log       io.Writer
	Harness   *Harness
}

// ScalingConfig is one P2 configuration: Processes `syncpipe run`
// processes on one storage, each with Workers workers_per_process.
type ScalingConfig struct{ Processes, Workers int }

func (c ScalingConfig) String() string {
	p, w := "processes", "workers"
	if c.Processes == 1 {
		p = "process"
	}
	if c.Workers == 1 {
		w = "worker"
	}
	return fmt.Sprintf("%d %s × %d %s", c.Processes, p, c.Workers, w)
}

// LeaseSetting is replication.lease of a takeover check (zero: the
// defaults).
type LeaseSetting struct{ Duration, Heartbeat time.Duration }

// defaultLease is config.Default's replication.lease.
var defaultLease = LeaseSetting{Duration: 30 * time.Second, Heartbeat: 10 * time.Second}

func (l LeaseSetting) orDefault() LeaseSetting {
	if l.Duration == 0 {
		l.Duration = defaultLease.Duration
	}
	if l.Heartbeat == 0 {
		l.Heartbeat = defaultLease.Heartbeat
	}
	return l
}

func (l LeaseSetting) String() string {
	d := l.orDefault()
	s := fmt.Sprintf("lease %s, heartbeat %s", d.Duration, d.Heartbeat)
	if l == (LeaseSetting{}) {
		s += " (the defaults)"
	}
	return s
}

// ScalingConfigs are the P2 configurations: 1 process × each of workers,
// then each of processes × 1 worker.
func ScalingConfigs(workers, processes []int) []ScalingConfig {
	var out []ScalingConfig
	for _, w := range workers {
		out = append(out, ScalingConfig{1, w})
	}
	for _, p := range processes {
		if p > 1 {
			out = append(out, ScalingConfig{p, 1})
		}
	}
	return out
}

// scalingRules puts every row of every table into its owner's bucket: one
// op per source row, so storage work per row is the same in every table.
func scalingRules(tables int) string {
	var b strings.Builder
	b.WriteString("bucket_definitions:\n  by_owner:\n    parameters: SELECT request.user_id() AS owner_id\n    data:\n")
	for i := range tables {
		fmt.Fprintf(&b, "      - SELECT * FROM %s WHERE owner_id = bucket.owner_id\n", scalingTable(i))
	}
	return b.String()
}

func scalingTable(i int) string { return fmt.Sprintf("items_%03d", i) }

// loadScaling creates the tables and fills them server-side. The rows are
// a pure function of (table, id), so every run sees the same data.
func loadScaling(ctx context.Context, src *pgx.Conn, opt ScalingOptions) error {
	for i := range opt.Tables {
		t := scalingTable(i)
		q := fmt.Sprintf(`CREATE TABLE %[1]s (
			id         bigint PRIMARY KEY,
			owner_id   text NOT NULL,
			title      text NOT NULL,
			amount     int NOT NULL,
			updated_at timestamptz NOT NULL);
		INSERT INTO %[1]s SELECT g, 'owner-' || (g * 7 + %[2]d) %% %[3]d,
			'item ' || g || ' of %[1]s: ' || md5('%[1]s' || g), (g * 31) %% 1000,
			timestamptz '2026-01-01 00:00:00Z' + g * interval '1 second'
		FROM generate_series(1, %[4]d) g`, t, i, max(opt.Owners, 1), opt.RowsPerTable)
		if _, err := src.Exec(ctx, q); err != nil {
			return fmt.Errorf("load %s: %w", t, err)
		}
		// Vacuumed now, not by autovacuum during the first configuration
		// (the inserts cross its insert threshold).
		if _, err := src.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	return nil
}

// scalingEnv is what every P2 run shares: the cluster, the child config
// and the connection that reads the statement counts.
type scalingEnv struct {
	opt     ScalingOptions
	cluster *pgcluster.Cluster
	data    string // the cluster's data directory
	rules   string
	total   int64
	stmts   *pgx.Conn // nil: pg_stat_statements not available
	mix     string    // the statements of the first 1 process × 1 worker run
}

func (e *scalingEnv) cfg(db string, workers int) SnapshotConfig {
	return SnapshotConfig{Source: e.cluster.URI("app"), Storage: e.cluster.URI(db), SlotPrefix: db + "_",
		Rules: e.rules, Workers: workers, ChunkRows: e.opt.ChunkRows, ClusterData: e.data}
}

// RunScaling measures SPEC §9 P2 as issue 16 redefines it for what 2
// cores can show: the snapshot of many small tables (one work unit each)
// by one syncpipe process with 1 and 2 workers and by 2 and 3 processes
// with 1 worker each, sharing the snapshot through storage leases, all in
// the same runs. Each configuration reports rows/s, the CPU per 1k rows of
// syncpipe and of Postgres, and the lease statements among all the
// statements storage executed (pg_stat_statements). Then a process is
// SIGKILLed mid-snapshot to time the takeover of its units, and a snapshot
// stopped halfway is resumed to check that no committed chunk is read
// again.
func RunScaling(ctx context.Context, opt ScalingOptions) (res Result, err error) {
	total := int64(opt.Tables * opt.RowsPerTable)
	res = Result{Scenario: "scaling", Date: time.Now(),
		Params: fmt.Sprintf("P2 (issue 16): %d tables × %d rows (%d rows, one op each in a by_owner bucket of %d owners; one work unit per table), chunk_rows %d, configurations %s interleaved in each of %d runs (reversed every other run), each on a fresh storage database of one cluster (fsync on; a CHECKPOINT before each configuration, its database dropped after it; the source tables vacuumed after loading); every process is `syncpipe run --role replication:snapshot`, a configuration is timed from its first process's start until storage has every table's snapshot done (polled every 50 ms)",
			opt.Tables, opt.RowsPerTable, total, opt.Owners, opt.ChunkRows, configNames(opt.Configs), opt.Runs)}
	if opt.Harness == nil {
		return res, fmt.Errorf("scaling scenario: no syncpipe harness")
	}
	load0, began := loadAvg(), time.Now()
	defer func() {
		res.Notes = append(res.Notes, fmt.Sprintf("The machine (%d cores, shared: other engineers' tests ran alongside) had a load average (1 min) of %s at the start and %s at the end of the scenario, %s in all; each configuration's machine busy share is in the table above.",
			runtime.NumCPU(), load0, loadAvg(), time.Since(began).Round(time.Second)))
	}()
	settings, stmtsNote := statementSettings()
	cluster, src, err := startClusterWith(ctx, "app", settings)
	if err != nil {
		return res, err
	}
	defer cluster.Stop()
	defer src.Close(context.WithoutCancel(ctx))
	env := &scalingEnv{opt: opt, cluster: cluster, data: filepath.Join(cluster.Dir(), "data"), rules: scalingRules(opt.Tables), total: total}
	if settings != nil {
		if env.stmts, err = openStatements(ctx, cluster.URI("postgres")); err != nil {
			return res, err
		}
		defer env.stmts.Close(context.WithoutCancel(ctx))
	}
	logf(opt.Log, "loading %d tables × %d rows…", opt.Tables, opt.RowsPerTable)
	if err := loadScaling(ctx, src, opt); err != nil {
		return res, err
	}

	var rows rowSet
	for _, c := range opt.Configs {
		rows.reserve(c.String(), "")
		rows.byName[c.String()].Workers = c.Workers
		rows.byName[c.String()].Processes = c.Processes
	}
	all := &Breakdown{}
	per := map[ScalingConfig]*Breakdown{}
	run := 0
	for r := range opt.Runs {
		for _, c := range interleaved(opt.Configs, r) {
			run++
			db := fmt.Sprintf("storage_%d", run)
			if err := cluster.CreateDatabase(ctx, db); err != nil {
				return res, err
			}
			// Every configuration starts from a written-out cluster, and
			// none pays for the autovacuum of the one before (its storage
			// database is dropped): the order of configurations must not
			// decide their rates.
			if err := cluster.Checkpoint(ctx); err != nil {
				return res, err
			}
			s, stages, err := env.measure(ctx, db, c)
			if err != nil {
				return res, fmt.Errorf("run %d, %s: %w", r+1, c, err)
			}
			if err := cluster.DropDatabase(ctx, db); err != nil {
				return res, err
			}
			all.Add(stages)
			if per[c] == nil {
				per[c] = &Breakdown{}
			}
			per[c].Add(stages)
			res.PeakRSS = max(res.PeakRSS, s.PeakRSS)
			rows.add(c.String(), "", s)
			logf(opt.Log, "run %d: %s: %.0f rows/s, CPU per 1k rows %.3f s syncpipe + %.3f s Postgres, %s, machine %.0f%% busy, peak RSS %s",
				r+1, c, rate(s), perK(s.SyncpipeCPU, s.Rows), perK(s.PostgresCPU, s.Rows), s.Statements.short(s.Duration), 100*s.CPUBusy, fmtBytes(s.PeakRSS))
		}
	}
	res.Rows = rows.list()
	res.Stages = all
	res.StagesOf = "over all runs and processes (each process's wall time counted: busy % is per process)"
	res.Notes = append(res.Notes, scalingTable2(res.Rows), scalingNotes(res.Rows, stmtsNote))
	if env.mix != "" {
		res.Notes = append(res.Notes, "The most frequent storage statements of the first 1 process × 1 worker run, per snapshot unit (one unit per table; lease statements are the kinds acquire, claim, holder, renew, release, session, and 2 of the txn per claim):\n\n"+env.mix)
	}
	for _, c := range opt.Configs {
		if per[c] == nil {
			continue
		}
		var sb strings.Builder
		_ = per[c].WriteTable(&sb)
		res.Notes = append(res.Notes, fmt.Sprintf("Stage-time summary, %s (all runs, all processes):\n\n```\n%s```", c, sb.String()))
	}
	res.Bars = append(res.Bars, scalingBars(res.Rows, opt.Tables)...)

	var takeovers []takeoverResult
	for i, l := range opt.Takeovers {
		t, err := env.takeover(ctx, fmt.Sprintf("storage_takeover_%d", i+1), l)
		if err != nil {
			return res, fmt.Errorf("takeover check (%s): %w", l, err)
		}
		res.PeakRSS = max(res.PeakRSS, t.peakRSS)
		takeovers = append(takeovers, t)
	}
	if len(takeovers) > 0 {
		res.Notes = append(res.Notes, takeoverNote(takeovers, total))
		res.Bars = append(res.Bars, takeoverBar(takeovers))
	}

	rr, err := resumeCheck(ctx, opt, cluster.CreateDatabase, env.cfg)
	if err != nil {
		return res, err
	}
	res.PeakRSS = max(res.PeakRSS, rr.peakRSS)
	res.Notes = append(res.Notes, rr.note(opt.ChunkRows))
	res.Bars = append(res.Bars, Bar{ID: "P2", Measure: "no chunk re-read on resume", Bar: "committed chunks read again = 0 (re-reads ≤ chunks in flight)",
		Value: fmt.Sprintf("%d rows (%.1f chunks) read twice, %d in flight at the stop; %d committed rows read again",
			rr.readTwice(), chunks(rr.readTwice(), opt.ChunkRows), rr.inFlight(), rr.committedReread()),
		Met: rr.committedReread() <= 0 && rr.readTwice() <= rr.inFlight()})
	return res, nil
}

// loadAvg is the 1-minute load average ("?" if unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func configNames(cs []ScalingConfig) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return strings.Join(out, ", ")
}

// measure runs configuration c on the fresh storage database db: its
// processes started (startChildren), timed from the first one's start to
// the moment storage has every table's snapshot done (polled every 50 ms:
// the data is complete then). CPU and statements are read at that moment.
// The group is marked done a little later — by the first process that has
// accounted for every unit, its own or found finished when it claims it
// again — which is when it logs "snapshot done"; that moment is kept too
// (GroupDone). Then the processes are stopped and storage is checked to
// hold exactly one op per row.
func (e *scalingEnv) measure(ctx context.Context, db string, c ScalingConfig) (Sample, Breakdown, error) {
	var s Sample
	var stages Breakdown
	cfg := e.cfg(db, c.Workers)
	cpu0, pg0 := readCPU(), clusterCPU(e.data)
	children, err := startChildren(ctx, e.opt.Harness, cfg, c.Processes, e.opt.Tables)
	if err != nil {
		return s, stages, err
	}
	complete, waitErr := awaitComplete(ctx, children, cfg.Storage, e.opt.Tables)
	cpu1, pg1 := readCPU(), clusterCPU(e.data)
	var sp time.Duration
	for _, ch := range children {
		sp += ch.CPU()
	}
	var stmts *StatementCounts
	var stmtErr error
	if waitErr == nil && e.stmts != nil {
		var raw []statementStat
		if raw, stmtErr = readStatements(ctx, e.stmts, db); stmtErr == nil {
			stmts = countStatements(raw)
			if c.Processes == 1 && c.Workers == 1 && e.mix == "" {
				e.mix = statementMix(raw, e.opt.Tables)
			}
		}
	}
	var groupDone time.Time
	if waitErr == nil {
		groupDone, waitErr = waitFirst(ctx, children, "snapshot done")
	}
	stats, stopErr := stopAll(children)
	if waitErr != nil {
		return s, stages, waitErr
	}
	if stopErr != nil {
		return s, stages, stopErr
	}
	if stmtErr != nil {
		return s, stages, stmtErr
	}
	for _, st := range stats {
		stages.Add(st.Stages)
		s.PeakRSS = max(s.PeakRSS, st.PeakRSS)
	}
	start := children[0].Started()
	s.Duration = complete.Sub(start)
	s.GroupDone = groupDone.Sub(start)
	s.Rows = e.total
	s.CPUBusy = busySince(cpu0, cpu1)
	s.SyncpipeCPU, s.PostgresCPU = sp, pg1-pg0
	s.OwnCPU = s.SyncpipeCPU + s.PostgresCPU
	s.Statements = stmts
	if s.Ops, s.Bytes, err = storedOps(ctx, cfg.Storage); err != nil {
		return s, stages, err
	}
	if s.Ops != e.total {
		return s, stages, fmt.Errorf("storage holds %d ops, want %d (one per row)", s.Ops, e.total)
	}
	if err := snapshotMarkedDone(ctx, cfg.Storage); err != nil {
		return s, stages, err
	}
	return s, stages, dropPrefixSlots(ctx, cfg.Source, cfg.SlotPrefix)
}

// benchTag starts the harness's own statements on storage, which the
// statement counts leave out.
const benchTag = "/* syncpipe-bench */ "

// awaitComplete polls storage every 50 ms until it has tables tables with
// their snapshot done, and returns when the poll that saw it was sent. A
// table is marked done by the process that commits its last range, right
// after that commit. Any child exiting first is an error.
func awaitComplete(ctx context.Context, children []*Child, uri string, tables int) (time.Time, error) {
	if _, err := children[0].WaitFor(ctx, "syncpipe starting"); err != nil { // storage migrated
		return time.Time{}, err
	}
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return time.Time{}, fmt.Errorf("connect to storage: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		sent := time.Now()
		var n int
		if err := conn.QueryRow(ctx, benchTag+`SELECT count(*) FROM syncpipe.source_tables WHERE snapshot_done`).Scan(&n); err != nil {
			return time.Time{}, fmt.Errorf("poll the snapshot's progress: %w", err)
		}
		if n >= tables {
			return sent, nil
		}
		if err := anyExited(children); err != nil {
			return time.Time{}, err
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil { // polling storage: the measured moment, ±25 ms
			return time.Time{}, err
		}
	}
}

// snapshotMarkedDone checks that storage has the group's snapshot done.
func snapshotMarkedDone(ctx context.Context, uri string) error {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return fmt.Errorf("read the group's state: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var groups, done int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE snapshot_done) FROM syncpipe.groups`).Scan(&groups, &done); err != nil {
		return fmt.Errorf("read the group's state: %w", err)
	}
	if groups != 1 || done != 1 {
		return fmt.Errorf("storage has %d groups, %d with the snapshot done: want the one group done", groups, done)
	}
	return nil
}

// startChildren starts n `syncpipe run` processes on cfg: the first, and
// the others as soon as the first has registered the tables in storage
// (tables of them). Started at the same moment, processes on a fresh
// storage race in RegisterTable (an INSERT … ON CONFLICT DO NOTHING whose
// fallback SELECT does not see the row a concurrent process is inserting:
// "register table …: no rows in result set", and the process exits); a
// supervisor would restart it, the harness avoids the race instead. The
// later processes' start-up is inside the timed span.
func startChildren(ctx context.Context, h *Harness, cfg SnapshotConfig, n, tables int) ([]*Child, error) {
	first, err := h.start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	children := []*Child{first}
	fail := func(err error) ([]*Child, error) {
		_, _ = stopAll(children)
		return nil, err
	}
	if n > 1 {
		if err := awaitRegistered(ctx, first, cfg.Storage, tables); err != nil {
			return fail(err)
		}
	}
	for range n - 1 {
		c, err := h.start(ctx, cfg)
		if err != nil {
			return fail(err)
		}
		children = append(children, c)
	}
	return children, nil
}

// awaitRegistered polls storage until it has tables source tables
// registered (or the child exits).
func awaitRegistered(ctx context.Context, c *Child, uri string, tables int) error {
	if _, err := c.WaitFor(ctx, "syncpipe starting"); err != nil { // storage migrated
		return err
	}
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return fmt.Errorf("connect to storage: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var n int
		if err := conn.QueryRow(ctx, benchTag+`SELECT count(*) FROM syncpipe.source_tables`).Scan(&n); err != nil {
			return fmt.Errorf("count registered tables: %w", err)
		}
		if n >= tables {
			return nil
		}
		if err := anyExited([]*Child{c}); err != nil {
			return err
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil { // polling storage: the first process's progress
			return err
		}
	}
}

// waitFirst waits until one of the children logs msg and returns the
// earliest time any of them logged it. Any child exiting first is an
// error.
func waitFirst(ctx context.Context, children []*Child, msg string) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		t   time.Time
		err error
	}
	ch := make(chan result, len(children))
	for _, c := range children {
		go func() {
			t, err := c.WaitFor(ctx, msg)
			ch <- result{t, err}
		}()
	}
	r := <-ch
	if r.err != nil {
		return time.Time{}, r.err
	}
	first := r.t
	for _, c := range children { // another may have logged it at the same moment
		if t, ok := c.Seen(msg); ok && t.Before(first) {
			first = t
		}
	}
	return first, nil
}

// stopAll stops the children at once (SIGTERM to all, then wait for each)
// and returns their stats; the first error wins.
func stopAll(children []*Child) ([]ChildStats, error) {
	stats := make([]ChildStats, len(children))
	errs := make([]error, len(children))
	done := make(chan struct{})
	for i, c := range children {
		go func() {
			stats[i], errs[i] = c.Stop()
			done <- struct{}{}
		}()
	}
	for range children {
		<-done
	}
	for _, err := range errs {
		if err != nil {
			return stats, err
		}
	}
	return stats, nil
}

// perK is CPU seconds per 1000 rows.
func perK(d time.Duration, rows int64) float64 {
	return d.Seconds() * 1000 / float64(max(rows, 1))
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// perSample is the median over a row's samples of f.
func rowMedian(r Row, f func(Sample) float64) float64 {
	var xs []float64
	for _, s := range r.Samples {
		xs = append(xs, f(s))
	}
	return median(xs)
}

func sampleRate(s Sample) float64 { return rate(s) }

// scalingTable2 is the table of the P2 figures per configuration.
func scalingTable2(rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Per configuration, median of %d runs (an even count: the mean of the middle two):\n\n", maxSamples(rows))
	fmt.Fprintln(&b, "| configuration | rows/s (min–max) | vs 1 process × 1 worker | CPU-s per 1k rows: syncpipe | Postgres | total | own cores / machine busy | group marked done after | storage statements/s | lease statements/s | lease share of statements | lease share of execution time | lease acquisitions: taken / tried per run |")
	fmt.Fprintln(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var base float64
	for _, r := range rows {
		if r.Processes == 1 && r.Workers == 1 && len(r.Samples) > 0 {
			base = rowMedian(r, sampleRate)
		}
	}
	for _, r := range rows {
		if len(r.Samples) == 0 {
			continue
		}
		med := rowMedian(r, sampleRate)
		lo, hi := med, med
		for _, s := range r.Samples {
			lo, hi = min(lo, rate(s)), max(hi, rate(s))
		}
		vs := "—"
		if base > 0 {
			vs = fmt.Sprintf("%.2f×", med/base)
		}
		spK := rowMedian(r, func(s Sample) float64 { return perK(s.SyncpipeCPU, s.Rows) })
		pgK := rowMedian(r, func(s Sample) float64 { return perK(s.PostgresCPU, s.Rows) })
		cores := rowMedian(r, func(s Sample) float64 { return s.OwnCPU.Seconds() / s.Duration.Seconds() })
		busy := rowMedian(r, func(s Sample) float64 { return s.CPUBusy })
		stmtCols := "— | — | — | — | —"
		if r.Samples[0].Statements != nil {
			all := rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Total) / s.Duration.Seconds() })
			lease := rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Lease) / s.Duration.Seconds() })
			share := rowMedian(r, func(s Sample) float64 { return s.Statements.leaseShare() })
			tshare := rowMedian(r, func(s Sample) float64 { return s.Statements.leaseTimeShare() })
			taken := rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Acquired) })
			tried := rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Acquires) })
			stmtCols = fmt.Sprintf("%.0f | %.1f | %.2f %% | %.3f %% | %.0f / %.0f", all, lease, 100*share, 100*tshare, taken, tried)
		}
		lag := rowMedian(r, func(s Sample) float64 { return (s.GroupDone - s.Duration).Seconds() })
		fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) | %s | %.3f | %.3f | %.3f | %.2f / %.0f %% | %+.2f s | %s |\n",
			r.Name, med, lo, hi, vs, spK, pgK, spK+pgK, cores, 100*busy, lag, stmtCols)
	}
	return strings.TrimRight(b.String(), "\n")
}

func maxSamples(rows []Row) int {
	n := 0
	for _, r := range rows {
		n = max(n, len(r.Samples))
	}
	return n
}

// scalingNotes explains the figures: how statements were counted, the 1 → 2
// workers ratio (information since issue 16) and the per-run pairs.
func scalingNotes(rows []Row, stmtsNote string) string {
	var b strings.Builder
	b.WriteString("CPU: syncpipe is the sum over the configuration's processes of their CPU time (user + system, /proc/<pid>/stat) at the end of the timed span, Postgres the cluster's processes over the same span (postmaster, backends of the source and of storage, exited ones included, auxiliary processes); \"machine busy\" is the whole machine's busy share, neighbours included. ")
	b.WriteString(stmtsNote)
	var pings []string
	for _, r := range rows {
		if len(r.Samples) > 0 && r.Samples[0].Statements != nil {
			pings = append(pings, fmt.Sprintf("%s %.2f %%", r.Name, 100*rowMedian(r, func(s Sample) float64 { return s.Statements.pingShare() })))
		}
	}
	if len(pings) > 0 {
		fmt.Fprintf(&b, " Lease share with the pings counted as statements: %s.", strings.Join(pings, ", "))
	}
	b.WriteString("\n\n\"Group marked done after\": the time from the data being complete (the timed end) to the group's snapshot being marked done, i.e. the first \"snapshot done\" log line: a process marks it once it has accounted for every unit, and a unit it found held by another process is looked at again only a heartbeat's jitter (½–1 × replication.lease.heartbeat, 5–10 s by default) later.")
	one, two := findRow(rows, 1, 1), findRow(rows, 1, 2)
	if one != nil && two != nil {
		fmt.Fprintf(&b, "\n\n1 → 2 workers in one process (information; SPEC §9's old ≥ 1.7× bar, which 2 cores cannot show — see benchmarks/README.md): %.2f× (%.0f → %.0f rows/s), per-run pairs %s.",
			rowMedian(*two, sampleRate)/rowMedian(*one, sampleRate), rowMedian(*one, sampleRate), rowMedian(*two, sampleRate), pairs(*two, *one))
	}
	b.WriteString(versusBestSingle(rows))
	return b.String()
}

// findRow is the row of processes × workers, nil if not measured.
func findRow(rows []Row, processes, workers int) *Row {
	for i, r := range rows {
		if r.Processes == processes && r.Workers == workers && len(r.Samples) > 0 {
			return &rows[i]
		}
	}
	return nil
}

// pairs are the rate ratios a/b of each run: the configurations of a run
// are measured back to back, so a pair shares the neighbours' load of the
// moment, which drifts a lot between runs.
func pairs(a, b Row) string {
	var out []string
	for i := range min(len(a.Samples), len(b.Samples)) {
		out = append(out, fmt.Sprintf("%.2f", rate(a.Samples[i])/rate(b.Samples[i])))
	}
	return strings.Join(out, ", ")
}

// scalingBars decides issue 16's P2 bars on the measured configurations:
// N processes × 1 worker ≥ 90 % of 1 process × N workers (the same
// concurrency, so the ratio is the cost of coordinating through storage;
// N = 2 always, "not measured" when missing, and N = 3 when both are
// measured), and lease statements < 1 % of storage statements in every
// configuration. 3 processes against the best single process is in the
// notes (versusBestSingle), not a bar.
func scalingBars(rows []Row, units int) []Bar {
	var bars []Bar
	for n := 2; n <= 3; n++ {
		single, multi := findRow(rows, 1, n), findRow(rows, n, 1)
		if n > 2 && (single == nil || multi == nil) {
			continue
		}
		bar := Bar{ID: "P2", Measure: fmt.Sprintf("%d processes × 1 worker vs 1 process × %d workers (coordination cost)", n, n),
			Bar: fmt.Sprintf("%d processes × 1 worker ≥ 90 %% of 1 process × %d workers", n, n)}
		if single == nil || multi == nil {
			bar.Value = "not measured"
		} else {
			ratio := rowMedian(*multi, sampleRate) / rowMedian(*single, sampleRate)
			bar.Value = fmt.Sprintf("%.0f vs %.0f rows/s = %.1f %%; per-run pairs %s", rowMedian(*multi, sampleRate), rowMedian(*single, sampleRate), 100*ratio, pairs(*multi, *single))
			bar.Met = ratio >= 0.9
			if !bar.Met {
				bar.Note = cpuNote(*multi, *single)
			}
		}
		bars = append(bars, bar)
	}

	lease := Bar{ID: "P2", Measure: "lease traffic", Bar: "lease statements < 1 % of storage statements"}
	var parts, perUnit []string
	worst, counted := 0.0, false
	for _, r := range rows {
		if len(r.Samples) == 0 || r.Samples[0].Statements == nil {
			continue
		}
		counted = true
		share := rowMedian(r, func(s Sample) float64 { return s.Statements.leaseShare() })
		for _, s := range r.Samples {
			worst = max(worst, s.Statements.leaseShare())
		}
		parts = append(parts, fmt.Sprintf("%s %.2f %% (%.1f/s)", r.Name, 100*share,
			rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Lease) / s.Duration.Seconds() })))
		perUnit = append(perUnit, fmt.Sprintf("%s %.1f lease and %.1f other statements per unit, %.2f claims per unit (%.2f taken)", r.Name,
			rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Lease) / float64(units) }),
			rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Total-s.Statements.Lease) / float64(units) }),
			rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Acquires) / float64(units) }),
			rowMedian(r, func(s Sample) float64 { return float64(s.Statements.Acquired) / float64(units) })))
	}
	if !counted {
		lease.Value = "not measured (pg_stat_statements not available)"
	} else {
		lease.Value = strings.Join(parts, ", ") + fmt.Sprintf("; worst run %.2f %%", 100*worst)
		lease.Met = worst < 0.01
		if !lease.Met {
			lease.Note = "a unit (one table, 2 chunks) has a few dozen write statements; one claim statement reads the state of up to 128 queued units and takes up to 17, one renewal per heartbeat covers all of a process's snapshot leases, and with several processes the units held elsewhere are asked about again about every heartbeat: " + strings.Join(perUnit, "; ")
		}
	}
	return append(bars, lease)
}

// cpuNote says whether the slower configuration had the cores to go faster.
func cpuNote(slow, fast Row) string {
	cores := func(r Row) float64 {
		return rowMedian(r, func(s Sample) float64 { return s.OwnCPU.Seconds() / s.Duration.Seconds() })
	}
	k := func(r Row) float64 {
		return rowMedian(r, func(s Sample) float64 { return perK(s.SyncpipeCPU+s.PostgresCPU, s.Rows) })
	}
	return fmt.Sprintf("CPU per 1k rows %.3f s vs %.3f s (syncpipe + Postgres), own cores %.2f vs %.2f, machine %.0f %% vs %.0f %% busy",
		k(slow), k(fast), cores(slow), cores(fast),
		100*rowMedian(slow, func(s Sample) float64 { return s.CPUBusy }), 100*rowMedian(fast, func(s Sample) float64 { return s.CPUBusy }))
}

func chunks(rows int64, chunk int) float64 { return float64(rows) / float64(max(chunk, 1)) }

// versusBestSingle compares 3 processes × 1 worker with the fastest single
// process, for the report: information, not a bar, since on 2 cores a
// third process or worker adds only contention in any arrangement. Empty
// when either is missing.
func versusBestSingle(rows []Row) string {
	three := findRow(rows, 3, 1)
	if three == nil {
		return ""
	}
	var best *Row
	for i, r := range rows {
		if r.Processes == 1 && len(r.Samples) > 0 && (best == nil || rowMedian(r, sampleRate) > rowMedian(*best, sampleRate)) {
			best = &rows[i]
		}
	}
	if best == nil {
		return ""
	}
	return fmt.Sprintf("\n\n3 processes × 1 worker vs the best single process (information: 2 cores run at most two of anything at once): %.0f rows/s = %.1f %% of %s (%.0f), per-run pairs %s; %s.",
		rowMedian(*three, sampleRate), 100*rowMedian(*three, sampleRate)/rowMedian(*best, sampleRate), best.Name, rowMedian(*best, sampleRate), pairs(*three, *best), cpuNote(*three, *best))
}
