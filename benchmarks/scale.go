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

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// The scale scenario is issue 47's acceptance benchmark: P1, P3 and P4 on
// todo data sets of several sizes, in both topologies, in the same run, so
// that the cost per row at the largest size is judged against the
// smallest's on the same machine at the same time. It is assembled from
// the other scenarios' parts: the snapshot is timed as P1's, the 1k-row
// catch-up and the steady lag are streaming's (streamRun), the drain is
// P4's (drainServer), the CPU split is clusterProcs and classify.

// ScaleOptions configures the scale scenario.
type ScaleOptions struct {
	// Sizes are the todo counts, each on clusters of its own; the bars
	// compare the largest with the smallest.
	Sizes []int
	Lists int
	// Topologies are where storage is (TwoClusters, OneCluster); each
	// size measures every one.
	Topologies []string
	// Workers and ChunkRows are the snapshot's workers_per_process and
	// chunk_rows.
	Workers, ChunkRows int
	// Updates single-row UPDATEs in TxnRows-row transactions measure P3's
	// throughput; SteadyRate changes/s for SteadyFor in SteadyTxnRows-row
	// transactions its lag.
	Updates, TxnRows int
	SteadyRate       int
	SteadyFor        time.Duration
	SteadyTxnRows    int
	// Runs of each configuration, each on a fresh storage database;
	// DrainRuns timed drains per storage.
	Runs, DrainRuns int
	// SharedBuffers is both clusters' shared_buffers.
	SharedBuffers string
	Log           io.Writer
	Harness       *Harness
}

// scaleSharedBuffers is what issue 47 measured with; the harness's
// clusters otherwise start with 256MB.
const scaleSharedBuffers = "1GB"

// runScaleScenario: full is issue 47's 1M and 10M todos, small 100k and
// 1M; 1,000 lists, 100k updates in 1k-row transactions, lag at 5k
// changes/s for 30 s (small 10 s), both topologies unless -topology picks
// one. -sizes, -lists, -runs, -writers, -batch and -for override.
func runScaleScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	topologies := p.Topologies
	if len(topologies) == 0 {
		topologies, _ = ParseTopologies("both")
	}
	return RunScale(ctx, ScaleOptions{
		Sizes: pickInts(p.Sizes, []int{100_000, 1_000_000}, []int{1_000_000, 10_000_000}, p.Scale),
		Lists: pick(p.Lists, 1000, 1000, p.Scale), Topologies: topologies,
		Workers: pickInts(p.Workers, []int{2}, []int{2}, p.Scale)[0], ChunkRows: pick(p.ChunkRows, 10_000, 10_000, p.Scale),
		Updates: 100_000, TxnRows: 1000,
		SteadyRate: 5000, SteadyFor: pick(p.For, 10*time.Second, 30*time.Second, p.Scale), SteadyTxnRows: 100,
		Runs: pick(p.Runs, 1, 1, p.Scale), DrainRuns: 2, SharedBuffers: scaleSharedBuffers,
		Log: p.Log, Harness: p.Harness})
}

// scaleRun is what one configuration's run measured: a size, a topology
// and a binary, on a storage database of its own.
type scaleRun struct {
	size     int
	topology string
	suffix   string // the binary's (compareSuffix for the old one)
	rows     int64  // source rows: todos, lists and the marker row

	// P1: the child's process start, its "created replication slot" (the
	// snapshot's first range starts right after), "snapshot done" and the
	// first published checkpoint.
	launched, slotCreated, snapshotDone, firstCheckpoint time.Time

	p1            Sample
	p1StorageCPU  time.Duration // storage backends (live processes)
	p1PostgresCPU time.Duration // both clusters' processes, exited ones too
	// Storage's buffer misses, the pages it grew by and its statements'
	// shared_blks_read (-1: not counted): see storageIO.since.
	p1Misses, p1Grown, p1SharedRead int64

	storageBytes int64
	relations    []relationSize

	// P3: the 1k-row-transaction catch-up and the steady lag.
	p3                              Sample
	p3StorageCPU                    time.Duration
	p3Misses, p3Grown, p3SharedRead int64
	lags                            []time.Duration
	achieved                        float64

	// P4: the timed drains.
	drains []Sample
}

// label names the configuration: "1M todos, one cluster".
func (r *scaleRun) label() string {
	return fmt.Sprintf("%s todos, %s", size(r.size), topologyLabel(r.topology))
}

// rowName is the result row of part of the run; the binary's suffix last,
// as compareNote expects.
func (r *scaleRun) rowName(part string) string { return r.label() + ": " + part + r.suffix }

// Parts of a scale run, as row names.
const (
	scaleP1       = "P1 process start → first checkpoint"
	scaleSnapshot = "P1 snapshot (slot created → snapshot done)"
	scaleP3       = "P3 1k-row transactions"
	scaleP4       = "P4 drain"
)

// RunScale measures issue 47's scale benchmark. Per size, a source
// cluster (and, for two clusters, a storage cluster) of its own with
// SharedBuffers and pg_stat_statements preloaded, the todo data set loaded
// in parallel (todos.LoadParallel); then per topology and run, each binary
// (interleaved, as Harness.variants) on a fresh storage database, one
// after the other: P1 (a `syncpipe run --role replication` child from
// process start to its first checkpoint), the storage's size, VACUUM
// ANALYZE, P4 (a new client's drain of every bucket through a
// `--role api` child), the slot moved on, P3's 1k-row catch-up with
// storage's CPU and buffer misses, VACUUM ANALYZE, P3's steady lag. The
// storage database and the slot are dropped before the next.
func RunScale(ctx context.Context, opt ScaleOptions) (Result, error) {
	res, _, err := runScale(ctx, opt)
	return res, err
}

// runScale is RunScale, also returning what every run measured.
func runScale(ctx context.Context, opt ScaleOptions) (Result, []*scaleRun, error) {
	sizes := slices.Clone(opt.Sizes)
	slices.Sort(sizes)
	opt.Sizes = slices.Compact(sizes)
	topologies := slices.Clone(opt.Topologies)
	if len(topologies) == 0 {
		topologies = []string{OneCluster}
	}
	slices.SortStableFunc(topologies, func(a, b string) int { // two clusters first, as P3
		return boolInt(a != TwoClusters) - boolInt(b != TwoClusters)
	})
	opt.Topologies = slices.Compact(topologies)
	opt.Runs, opt.DrainRuns = max(opt.Runs, 1), max(opt.DrainRuns, 1)
	settings, _ := statementSettings()
	settings = maps.Clone(settings)
	if settings == nil {
		settings = map[string]string{}
	}
	if opt.SharedBuffers != "" {
		settings["shared_buffers"] = opt.SharedBuffers
	}
	res := Result{Scenario: "scale", Date: time.Now(), Params: scaleParams(opt) + opt.Harness.compareParams()}
	if opt.Harness == nil {
		return res, nil, fmt.Errorf("scale scenario: no syncpipe harness")
	}
	sc := &scaleSet{opt: opt, settings: settings, statements: settings["shared_preload_libraries"] != ""}
	// Every size is set up first and the runs then go round the sizes
	// (run 1 of each, then run 2 of each, …): the bars are ratios between
	// sizes, and on a shared machine whose speed drifts over the tens of
	// minutes a run takes, measuring each size's runs together would put
	// the drift into the ratio.
	var sets []*scaleSize
	defer func() {
		for _, z := range sets {
			z.stop(ctx)
		}
	}()
	for _, n := range opt.Sizes {
		z, err := sc.setUp(ctx, n)
		if err != nil {
			return res, sc.runs, err
		}
		sets = append(sets, z)
	}
	for range opt.Runs {
		for _, z := range sets {
			if err := sc.measureRun(ctx, z); err != nil {
				return res, sc.runs, err
			}
		}
	}
	res.PeakRSS = sc.peakRSS
	res.Rows = sc.rows.list()
	res.Notes = append(res.Notes, scaleTable(sc.runs))
	res.Notes = append(res.Notes, relationsNote(sc.runs))
	if n := compareNote(res.Rows, "rows/s, changes/s, ops/s"); n != "" {
		res.Notes = append(res.Notes, n, scaleCompareNote(sc.runs))
	}
	if !sc.statements {
		res.Notes = append(res.Notes, "shared_blks_read not counted: the server has no pg_stat_statements library.")
	}
	res.Bars = scaleBars(opt, sc.runs)
	return res, sc.runs, nil
}

// scaleParams describes the scenario's set-up.
func scaleParams(opt ScaleOptions) string {
	var sz, labels []string
	for _, n := range opt.Sizes {
		sz = append(sz, size(n))
	}
	for _, t := range opt.Topologies {
		labels = append(labels, topologyLabel(t))
	}
	return fmt.Sprintf("Scale (issue 47): todos %s / %d lists, each size on clusters of its own (fsync on, shared_buffers %s, pg_stat_statements preloaded), topologies %s; "+
		"per configuration and run a fresh storage database (synchronous_commit=off) and `syncpipe run --role replication` children, %d workers, chunk_rows %d, split_rows 100000; "+
		"P1 timed from process start to the first published checkpoint (the snapshot itself: from the \"created replication slot\" log line — the first range starts right after — to \"snapshot done\"); "+
		"P3: %d single-row UPDATEs in %d-row transactions consumed from the slot, from START_REPLICATION to a checkpoint covering them; lag at %d changes/s in %d-row transactions for %s; "+
		"P4: a new client's drain of every bucket (NDJSON) from a `syncpipe run --role api` child, after VACUUM ANALYZE, %d timed drains; %d run(s) per configuration",
		strings.Join(sz, ", "), opt.Lists, opt.SharedBuffers, strings.Join(labels, " and "), opt.Workers, opt.ChunkRows,
		opt.Updates, opt.TxnRows, opt.SteadyRate, opt.SteadyTxnRows, opt.SteadyFor, opt.DrainRuns, opt.Runs)
}

// scaleSet holds what the sizes of a scale run share.
type scaleSet struct {
	opt        ScaleOptions
	settings   map[string]string
	statements bool // pg_stat_statements is preloaded
	rows       rowSet
	runs       []*scaleRun
	peakRSS    int64
	k          int // configurations measured, for the binaries' order
}

// scaleSize is one size's data set: its source cluster, a storage
// cluster for the two-cluster topology, and a streamRun per topology.
type scaleSize struct {
	n       int
	cluster *pgcluster.Cluster
	src     *pgx.Conn
	storage *pgcluster.Cluster
	byTopo  map[string]*streamRun
}

// setUp loads a data set of n todos on fresh clusters (stopped again if
// it fails).
func (sc *scaleSet) setUp(ctx context.Context, n int) (_ *scaleSize, err error) {
	opt := sc.opt
	z := &scaleSize{n: n, byTopo: map[string]*streamRun{}}
	defer func() {
		if err != nil {
			z.stop(ctx)
		}
	}()
	if z.cluster, z.src, err = startClusterWith(ctx, "app", sc.settings); err != nil {
		return nil, err
	}
	logf(opt.Log, "loading %d todos / %d lists…", n, opt.Lists)
	start := time.Now()
	if _, err := todos.LoadParallel(ctx, z.cluster.URI("app"), todos.Size{Lists: opt.Lists, Todos: n, Seed: 42}, 2); err != nil {
		return nil, err
	}
	logf(opt.Log, "loaded in %s", time.Since(start).Round(time.Millisecond))
	if err := createMarks(ctx, z.src); err != nil {
		return nil, err
	}
	ids, err := sampleIDs(ctx, z.src, n, opt.Updates+int(float64(opt.SteadyRate)*opt.SteadyFor.Seconds()))
	if err != nil {
		return nil, err
	}
	if slices.Contains(opt.Topologies, TwoClusters) {
		logf(opt.Log, "starting the storage cluster…")
		if z.storage, err = pgcluster.Start(ctx, pgcluster.Options{Durable: true, Settings: sc.settings}); err != nil {
			return nil, err
		}
	}
	for _, topo := range opt.Topologies {
		sr := &streamRun{cluster: z.cluster, src: z.src, ids: ids,
			opt: StreamingOptions{Todos: n, Lists: opt.Lists, Updates: opt.Updates, TxnRows: opt.TxnRows, Runs: 1,
				SteadyRate: opt.SteadyRate, SteadyFor: opt.SteadyFor, SteadyTxnRows: opt.SteadyTxnRows, Log: opt.Log}}
		if topo == TwoClusters {
			sr.storageCluster = z.storage
		}
		z.byTopo[topo] = sr
	}
	// The first read of freshly loaded rows sets their hint bits, which
	// dirties and writes the whole table: without this, the first P1 of
	// a size (always the same binary's) paid for it. No run has a
	// storage target yet, so this vacuums and checkpoints the source.
	if err := z.byTopo[opt.Topologies[0]].vacuum(ctx); err != nil {
		return nil, err
	}
	return z, nil
}

// stop stops z's clusters.
func (z *scaleSize) stop(ctx context.Context) {
	if z.src != nil {
		z.src.Close(context.WithoutCancel(ctx))
	}
	if z.storage != nil {
		_ = z.storage.Stop()
	}
	if z.cluster != nil {
		_ = z.cluster.Stop()
	}
}

// measureRun measures one run of every topology and binary on z.
func (sc *scaleSet) measureRun(ctx context.Context, z *scaleSize) error {
	for _, topo := range sc.opt.Topologies {
		sc.k++
		for _, v := range interleaved(sc.opt.Harness.variants(), sc.k-1) {
			run := &scaleRun{size: z.n, topology: topo, suffix: v.suffix, rows: int64(z.n + sc.opt.Lists + 1)}
			if err := sc.measure(ctx, z.byTopo[topo], v, run); err != nil {
				return fmt.Errorf("%s%s: %w", run.label(), v.suffix, err)
			}
			sc.add(run)
		}
	}
	return nil
}

// sampleIDs returns about want todo ids (all of them if there are fewer)
// spread over the whole table: a seeded sample in the heap's order, which
// is generation order, so the ids are random in the key space and the
// updates touch storage's rows all over, not one hot range.
func sampleIDs(ctx context.Context, src *pgx.Conn, total, want int) ([]string, error) {
	pct := min(100, 100*1.2*float64(want)/float64(max(total, 1)))
	ids, err := pgx.CollectRows(mustQuery(ctx, src, fmt.Sprintf(
		`SELECT id::text FROM todos TABLESAMPLE BERNOULLI (%f) REPEATABLE (42) LIMIT %d`, pct, want)), pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sample todo ids: %w", err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("sample todo ids: none")
	}
	return ids, nil
}

// measure runs one configuration on a fresh storage database in sr's
// topology with binary v, and drops that database and the slot after.
func (sc *scaleSet) measure(ctx context.Context, sr *streamRun, v variant, run *scaleRun) (err error) {
	opt := sc.opt
	storageCluster := sr.cluster
	if sr.storageCluster != nil {
		storageCluster = sr.storageCluster
	}
	db := fmt.Sprintf("storage_%d", len(sc.runs)+1)
	if err := storageCluster.CreateDatabase(ctx, db); err != nil {
		return err
	}
	t := &streamTarget{topology: run.topology, suffix: v.suffix, h: v.h, storageCluster: storageCluster, storageDB: db}
	t.cfg = v.h.config(SnapshotConfig{Source: sr.cluster.URI("app"), Storage: t.storageURI(), SlotPrefix: db + "_",
		Rules: streamingRules, Workers: opt.Workers, ChunkRows: opt.ChunkRows, SplitRows: 100000})
	if t.storage, err = pgx.Connect(ctx, t.storageURI()); err != nil {
		return fmt.Errorf("connect to storage: %w", err)
	}
	sr.targets = []*streamTarget{t}
	defer func() {
		t.storage.Close(context.WithoutCancel(ctx))
		if derr := dropSlots(ctx, sr.src); err == nil {
			err = derr
		}
		if derr := storageCluster.DropDatabase(ctx, db); err == nil {
			err = derr
		}
	}()
	var stmts *pgx.Conn
	if sc.statements {
		if stmts, err = openStatements(ctx, storageCluster.URI("postgres")); err != nil {
			return err
		}
		defer stmts.Close(context.WithoutCancel(ctx))
	}
	name := run.label() + v.suffix
	logf(opt.Log, "%s: P1 snapshot…", name)
	if err := sc.p1(ctx, sr, t, stmts, run); err != nil {
		return err
	}
	logf(opt.Log, "%s: P1 %.0f rows/s (snapshot %.0f rows/s; snapshot done → first checkpoint %s)", name,
		rate(run.p1), float64(run.rows)/run.snapshotDone.Sub(run.slotCreated).Seconds(), run.firstCheckpoint.Sub(run.snapshotDone).Round(time.Millisecond))
	if run.storageBytes, run.relations, err = storageSize(ctx, t.storage); err != nil {
		return err
	}
	logf(opt.Log, "%s: storage %s = %.0f bytes per source row", name, fmtBytes(run.storageBytes), float64(run.storageBytes)/float64(run.rows))
	if err := sr.vacuum(ctx); err != nil {
		return err
	}
	if err := sc.p4(ctx, t, run); err != nil {
		return err
	}
	if _, err := sr.settle(ctx); err != nil {
		return err
	}
	if err := sc.p3(ctx, sr, t, stmts, run); err != nil {
		return err
	}
	if err := sr.vacuum(ctx); err != nil {
		return err
	}
	lags, achieved, st, err := sr.steady(ctx, t)
	if err != nil {
		return err
	}
	sc.peakRSS = max(sc.peakRSS, st.PeakRSS)
	run.lags, run.achieved = lags, achieved
	logf(opt.Log, "%s: lag p50 %s, p99 %s at %.0f changes/s", name, percentile(lags, 0.5).Round(time.Millisecond/10),
		percentile(lags, 0.99).Round(time.Millisecond/10), achieved)
	return nil
}

// p1 runs the snapshot child until its first checkpoint: P1's times, the
// CPU of syncpipe and Postgres, and storage's buffer misses.
func (sc *scaleSet) p1(ctx context.Context, sr *streamRun, t *streamTarget, stmts *pgx.Conn, run *scaleRun) error {
	srcData, stoData := filepath.Join(sr.cluster.Dir(), "data"), ""
	if t.twoClusters() {
		stoData = filepath.Join(t.storageCluster.Dir(), "data")
	}
	cpu0, pg0 := readCPU(), clusterCPU(srcData)+clusterCPU(stoData)
	src0, sto0 := clusterProcs(srcData), clusterProcs(stoData)
	child, err := sr.startChild(ctx, t)
	if err != nil {
		return err
	}
	run.launched = child.Started()
	run.slotCreated, err = child.WaitFor(ctx, "created replication slot")
	if err == nil {
		run.snapshotDone, err = child.WaitFor(ctx, "snapshot done")
	}
	if err == nil {
		run.firstCheckpoint, err = t.waitCheckpointPast(ctx, "0/1", child)
	}
	cpu1 := readCPU()
	if err == nil {
		// Before the child stops: its backends exit with it.
		run.p1StorageCPU = t.classify(clusterProcs(srcData).since(src0), clusterProcs(stoData).since(sto0))["storage backends"]
	}
	st, stopErr := child.Stop()
	if err != nil {
		return err
	}
	if stopErr != nil {
		return stopErr
	}
	run.p1PostgresCPU = clusterCPU(srcData) + clusterCPU(stoData) - pg0
	sc.peakRSS = max(sc.peakRSS, st.PeakRSS)
	run.p1 = Sample{Duration: run.firstCheckpoint.Sub(run.launched), Rows: run.rows, PeakRSS: st.PeakRSS,
		CPUBusy: busySince(cpu0, cpu1), OwnCPU: run.p1PostgresCPU + st.User + st.System,
		SyncpipeCPU: st.User + st.System, PostgresCPU: run.p1PostgresCPU}
	io, err := storageReads(ctx, t, stmts)
	if err != nil {
		return err
	}
	// From a fresh database: the counters started at zero with it.
	run.p1Misses, run.p1Grown, run.p1SharedRead = io.since(storageIO{shared: 0})
	return nil
}

// p3 commits the updates with syncpipe stopped and times a child's
// catch-up on them (streamRun.catchUpTimed), reading storage's buffer
// misses before and after.
func (sc *scaleSet) p3(ctx context.Context, sr *streamRun, t *streamTarget, stmts *pgx.Conn, run *scaleRun) error {
	if err := sr.update(ctx, 0); err != nil {
		return err
	}
	io0, err := storageReads(ctx, t, stmts)
	if err != nil {
		return err
	}
	var before []statementStat
	if stmts != nil {
		if before, err = readStatements(ctx, stmts, t.storageDB); err != nil {
			return err
		}
	}
	cu, err := sr.catchUpTimed(ctx, t, &t.smallCost, int64(sr.opt.Updates), false)
	if err != nil {
		return err
	}
	sc.peakRSS = max(sc.peakRSS, cu.Child.PeakRSS)
	io1, err := storageReads(ctx, t, stmts)
	if err != nil {
		return err
	}
	run.p3, run.p3StorageCPU = cu.Sample, t.smallCost.cpu["storage backends"]
	run.p3Misses, run.p3Grown, run.p3SharedRead = io1.since(io0)
	if stmts != nil {
		after, err := readStatements(ctx, stmts, t.storageDB)
		if err != nil {
			return err
		}
		logStatements(sc.opt.Log, run.label()+run.suffix+": P3 storage statements", statementsSince(before, after), run.p3.Rows)
	}
	logf(sc.opt.Log, "%s%s: P3 %.0f changes/s, storage backends %s per change, %.2f buffer misses per change", run.label(), run.suffix,
		rate(run.p3), (run.p3StorageCPU / time.Duration(max(run.p3.Rows, 1))).Round(100*time.Nanosecond), float64(run.p3Misses)/float64(max(run.p3.Rows, 1)))
	return nil
}

// p4 drains every bucket as a new client from a `--role api` child of the
// configuration's binary: one untimed stream to its checkpoint line (the
// server's watcher, rules and connections ready), then the timed drains.
func (sc *scaleSet) p4(ctx context.Context, t *streamTarget, run *scaleRun) error {
	d := &drainData{todos: run.size, lists: sc.opt.Lists, storeURI: t.storageURI(), ops: run.rows}
	ds, err := startDrainServer(ctx, t.h, d, bucketstore.ReadLateral)
	if err != nil {
		return err
	}
	defer func() { sc.peakRSS = max(sc.peakRSS, ds.close()) }()
	if err := ds.warm(ctx); err != nil {
		return fmt.Errorf("warm up the sync API: %w", err)
	}
	for range sc.opt.DrainRuns {
		st, err := ds.drainOnce(ctx, 0, wireNDJSON)
		if err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		if st.ops != d.ops {
			return fmt.Errorf("drain: received %d ops, the data set has %d", st.ops, d.ops)
		}
		run.drains = append(run.drains, Sample{Duration: st.total, Rows: st.ops, Ops: st.ops, Bytes: st.bytes})
		logf(sc.opt.Log, "%s%s: P4 drain %s, %.0f ops/s", run.label(), run.suffix, st.total.Round(time.Millisecond), float64(st.ops)/st.total.Seconds())
	}
	return nil
}

// add files a finished run's samples under its rows.
func (sc *scaleSet) add(run *scaleRun) {
	sc.runs = append(sc.runs, run)
	sc.rows.add(run.rowName(scaleP1), "", run.p1)
	sc.rows.add(run.rowName(scaleSnapshot), "", Sample{Duration: run.snapshotDone.Sub(run.slotCreated), Rows: run.rows})
	sc.rows.add(run.rowName(scaleP3), "", run.p3)
	for _, d := range run.drains {
		sc.rows.add(run.rowName(scaleP4), "", d)
	}
}
