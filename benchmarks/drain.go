package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// DrainOptions configures the P4 drain scenario.
type DrainOptions struct {
	// Todos and Lists are the data set sizes; every combination is
	// measured. Empty = the SPEC sizes ({10k, 100k, 1M} × {200, 1k}).
	Todos, Lists []int
	// Runs per configuration and query shape; the median is reported.
	Runs int
	// BaselineTimeout bounds one OR-chain drain (0 = none): each of its
	// batches rereads what the drain has passed, so at 1M todos a single
	// drain takes hours. A drain cut off is recorded as a row of its own,
	// marked "cut off", with the ops it received in the time it ran; the
	// data set's later OR-chain runs are skipped.
	BaselineTimeout time.Duration
	Log             io.Writer
	// NewDatabase, if set, creates an empty database and returns its URI
	// (tests pass their harness's); nil starts a throwaway cluster.
	NewDatabase func(ctx context.Context, name string) (string, error)
	// Harness, if set, serves the LATERAL drains from a `syncpipe run
	// --role api` child process, whose peak RSS the result reports; nil
	// serves them in-process.
	Harness *Harness
}

// SmallDrain is the quick scale: the two smaller todo counts only.
var SmallDrain = []int{10_000, 100_000}

// SPEC §9 P4 sizes.
var (
	specDrainTodos = []int{10_000, 100_000, 1_000_000}
	specDrainLists = []int{200, 1000}
)

// Query shapes of the drain, in the order each run measures them.
var drainShapes = []struct {
	name  string
	shape bucketstore.ReadShape
}{
	{"LATERAL", bucketstore.ReadLateral},
	{"OR-chain", bucketstore.ReadORChain},
}

// drainBarSeconds is P4's bar for 1M todos / 1k lists.
const drainBarSeconds = 12

// drainSharedBuffers is the storage cluster's shared_buffers.
const drainSharedBuffers = "1GB"

// RunDrain measures SPEC §9 P4: a new client draining every bucket of the
// todo data set through POST /sync/stream. The data is really replicated
// (snapshot, then the stream until the first checkpoint covers it) into
// a storage database; then an in-process sync API server per query shape
// serves it and, per run, a Go client entitled to every bucket (global +
// one by_list bucket per list) reads the NDJSON stream until
// checkpoint_complete. The baseline, measured in the same run on
// the same data through the same endpoint, is the OR-chain query shape
// the LATERAL read replaced. The LATERAL shape is drained as NDJSON, as
// BSON with zstd, and as BSON over the WebSocket transport (RSocket, with
// REQUEST_N credit as the SDKs keep it: drainws.go), and for each drain
// the server's CPU is measured — the
// sync API child's and the storage cluster's (see drain_cpu.go) — so the
// report shows what the SDKs' encoding costs the server, not only how
// much smaller it is on the wire.
func RunDrain(ctx context.Context, opt DrainOptions) (Result, error) {
	if len(opt.Todos) == 0 {
		opt.Todos = specDrainTodos
	}
	if len(opt.Lists) == 0 {
		opt.Lists = specDrainLists
	}
	opt.Runs = max(opt.Runs, 1)
	res := Result{Scenario: "drain", Date: time.Now(),
		Params: fmt.Sprintf("P4: first sync of a client entitled to every bucket (global + by_list per list), todos %s × lists %v, "+
			"median of %d runs; data replicated by syncpipe (snapshot + stream to the first checkpoint), then VACUUM ANALYZE (the state "+
			"autovacuum reaches) and one untimed warm-up drain; %s, checksums computed by every drain (cache of one "+
			"entry), Go client over loopback HTTP, NDJSON raw_data without compression (the LATERAL shape also as BSON with zstd, what the SDKs ask for over HTTP, "+
			"and as BSON over WebSocket, RSocket frames without compression, what they get with connectionMethod 'web-socket'); "+
			"server CPU per drain: the sync API child's and the storage cluster's processes', from the request until both are idle; "+
			"storage cluster shared_buffers %s; baseline: the OR-chain query "+
			"shape through the same endpoint, cut off after %s",
			sizes(opt.Todos), opt.Lists, opt.Runs, drainServerKind(opt.Harness), drainSharedBuffers, opt.BaselineTimeout) + drainCompareParams(opt.Harness)}
	newDB := opt.NewDatabase
	if newDB != nil {
		res.Params = strings.Replace(res.Params, "shared_buffers "+drainSharedBuffers, "settings as given", 1)
	} else {
		// shared_buffers holds the largest data set's storage (bucket data
		// and its index, ~0.6 GB at 1M todos), as a sync server's storage
		// is sized in production; the harness default (256 MB) measures
		// reads from the OS page cache instead.
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"shared_buffers": drainSharedBuffers}})
		if err != nil {
			return res, err
		}
		defer cluster.Stop()
		newDB = func(ctx context.Context, name string) (string, error) {
			return cluster.URI(name), cluster.CreateDatabase(ctx, name)
		}
	}
	var rows rowSet
	var cpuRows []drainCPURow
	medians := map[[2]int]time.Duration{} // (todos, lists) → LATERAL median
	for _, lists := range opt.Lists {
		for _, n := range opt.Todos {
			d, err := prepareDrain(ctx, newDB, n, lists, opt.Log)
			if err != nil {
				return res, err
			}
			notes, err := measureDrain(ctx, d, opt, &rows, &cpuRows, &res.PeakRSS)
			d.store.Close()
			if err != nil {
				return res, err
			}
			res.Notes = append(res.Notes, notes...)
			if r := rows.byName[drainRowName(n, lists, drainShapes[0].name)]; r != nil {
				medians[[2]int{n, lists}] = r.Median().Duration
			}
		}
	}
	res.Rows = rows.list()
	if note := drainCPUNote(cpuRows, opt.Runs); note != "" {
		res.Notes = append([]string{note}, res.Notes...)
	}
	if n := compareNote(res.Rows, "ops/s"); n != "" {
		res.Notes = append(res.Notes, n)
	}
	res.Bars = drainBars(opt, medians)
	for _, b := range res.Bars {
		met := "met"
		if !b.Met {
			met = "NOT met"
		}
		logf(opt.Log, "P4 bar %q: %s — %s", b.Bar, met, b.Value)
	}
	return res, nil
}

// drainData is one replicated data set.
type drainData struct {
	todos, lists int
	store        *bucketstore.Store
	storeURI     string
	ops          int64 // ops a full drain must deliver
}

// prepareDrain loads a source database with the todo data set and
// replicates it into a new storage database until a checkpoint covers it.
func prepareDrain(ctx context.Context, newDB func(context.Context, string) (string, error), n, lists int, log io.Writer) (*drainData, error) {
	name := fmt.Sprintf("drain_%d_%d", n, lists)
	srcURI, storeURI, src, err := sourceAndStorage(ctx, newDB, name)
	if err != nil {
		return nil, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	logf(log, "drain %s todos / %d lists: loading and replicating…", size(n), lists)
	if _, err := todos.Load(ctx, src, todos.Size{Lists: lists, Todos: n, Seed: 42}); err != nil {
		return nil, err
	}
	var lsnText string // the insert position: see streamRounds
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsnText); err != nil {
		return nil, fmt.Errorf("read the source WAL position: %w", err)
	}
	target, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return nil, fmt.Errorf("parse source WAL position: %w", err)
	}
	cfg, err := config.LoadBytes("drain.yaml", fmt.Appendf(nil, `
source: {uri: %q, slot_prefix: %q, heartbeat_interval: 1s}
storage: {uri: %q}
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
	start := time.Now()
	if err := replicateUntil(ctx, cfg, store, target); err != nil {
		store.Close()
		return nil, err
	}
	logf(log, "drain %s todos / %d lists: replicated in %s", size(n), lists, time.Since(start).Round(time.Millisecond))
	if err := dropSlots(ctx, src); err != nil {
		store.Close()
		return nil, err
	}
	// The source is not read again, but autovacuum would visit its freshly
	// loaded tables within a minute — in the same cluster as storage, during
	// the drains, whose storage CPU would then include it.
	if _, err := src.Exec(ctx, "VACUUM (ANALYZE)"); err != nil {
		store.Close()
		return nil, fmt.Errorf("vacuum the source: %w", err)
	}
	// Right after the snapshot every row still needs its hint bits set and
	// the planner has no statistics; autovacuum settles both within a
	// minute, and a benchmark should not measure whichever drain it lands
	// in.
	if _, err := store.Pool().Exec(ctx, "VACUUM (ANALYZE) bucket_data, bucket_data2, bucket_parameters, current_data, current_data2, current_data3"); err != nil {
		store.Close()
		return nil, fmt.Errorf("vacuum storage: %w", err)
	}
	return &drainData{todos: n, lists: lists, store: store, storeURI: storeURI, ops: int64(n + lists)}, nil
}

// sourceAndStorage creates the source and storage databases of a data
// set named name and connects to the source (the caller closes it).
func sourceAndStorage(ctx context.Context, newDB func(context.Context, string) (string, error), name string) (srcURI, storeURI string, src *pgx.Conn, err error) {
	if srcURI, err = newDB(ctx, name+"_src"); err != nil {
		return "", "", nil, fmt.Errorf("create source database: %w", err)
	}
	if storeURI, err = newDB(ctx, name+"_store"); err != nil {
		return "", "", nil, fmt.Errorf("create storage database: %w", err)
	}
	if src, err = pgx.Connect(ctx, srcURI); err != nil {
		return "", "", nil, fmt.Errorf("connect to the source: %w", err)
	}
	return srcURI, storeURI, src, nil
}

// replicateUntil runs replication until the active group has published a
// checkpoint at or past the source position target, then stops it.
func replicateUntil(ctx context.Context, cfg *config.Config, store *bucketstore.Store, target pglogrepl.LSN) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := replication.New(replication.Options{Config: cfg, Store: store, Role: "replication"})
	errc := make(chan error, 1)
	go func() { errc <- rep.Run(rctx) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return fmt.Errorf("replication stopped before the first checkpoint: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		cp, _, ok, err := store.Reader().ActiveCheckpoint(ctx)
		if err != nil {
			return err
		}
		if ok && cp.LSN >= target {
			cancel()
			if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("stop replication: %w", err)
			}
			return nil
		}
	}
}

// dropSlots removes the data set's replication slot once replication has
// stopped, so it does not hold back WAL (a cluster-wide resource) while
// the next data sets are written. A slot stays active for a moment while
// its walsender exits.
func dropSlots(ctx context.Context, src *pgx.Conn) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows, err := src.Query(ctx, `SELECT slot_name, active FROM pg_replication_slots WHERE database = current_database()`)
		if err != nil {
			return fmt.Errorf("list replication slots: %w", err)
		}
		var idle []string
		active := 0
		for rows.Next() {
			var name string
			var busy bool
			if err := rows.Scan(&name, &busy); err != nil {
				return fmt.Errorf("list replication slots: %w", err)
			}
			if busy {
				active++
			} else {
				idle = append(idle, name)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list replication slots: %w", err)
		}
		for _, name := range idle {
			if _, err := src.Exec(ctx, "SELECT pg_drop_replication_slot($1)", name); err != nil {
				return fmt.Errorf("drop replication slot %s: %w", name, err)
			}
		}
		if active == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop replication slots: %d still active after 10 s", active)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// measureDrain runs the drains of one data set, shapes interleaved within
// each run so that both see the same machine noise, and measures the
// server's CPU of each (the LATERAL drains' go to cpuRows as well). It
// returns notes on the wire formats and on baseline drains that were cut
// off.
func measureDrain(ctx context.Context, d *drainData, opt DrainOptions, rows *rowSet, cpuRows *[]drainCPURow, peakRSS *int64) ([]string, error) {
	pm, err := storagePostmaster(ctx, d.store)
	if err != nil {
		return nil, err
	}
	servers := make([]*drainServer, len(drainShapes))
	for i, sh := range drainShapes {
		var h *Harness
		if sh.shape == bucketstore.ReadLateral {
			h = opt.Harness
		}
		ds, err := startDrainServer(ctx, h, d, sh.shape)
		if err != nil {
			return nil, err
		}
		defer func() { *peakRSS = max(*peakRSS, ds.close()) }()
		if err := ds.warm(ctx); err != nil {
			return nil, fmt.Errorf("warm up the %s server: %w", sh.name, err)
		}
		servers[i] = ds
	}
	// The binaries a LATERAL drain is measured with: the new one, and in a
	// comparison run the old one, a second API child on the same storage.
	lateralServers := []drainBinary{{"", servers[0]}}
	if opt.Harness != nil && opt.Harness.Compare != "" {
		ds, err := startDrainServer(ctx, opt.Harness.variants()[1].h, d, bucketstore.ReadLateral)
		if err != nil {
			return nil, fmt.Errorf("old binary: %w", err)
		}
		defer ds.close() // the reported peak RSS (P6) is the new build's
		if err := ds.warm(ctx); err != nil {
			return nil, fmt.Errorf("warm up the old binary's LATERAL server: %w", err)
		}
		lateralServers = append(lateralServers, drainBinary{compareSuffix, ds})
	}
	// One untimed drain loads the data into shared buffers, so that the
	// first measured run is not the only one reading from the OS (and, in
	// a comparison run, warms each binary alike).
	for _, b := range lateralServers {
		if _, err := b.server.drainOnce(ctx, 0, wireNDJSON); err != nil {
			return nil, fmt.Errorf("warm-up drain%s: %w", b.suffix, err)
		}
	}
	var notes []string
	var firstCP = map[string][]time.Duration{}
	baseline := drainRowName(d.todos, d.lists, drainShapes[1].name)
	cutOff := false
	// The LATERAL shape is drained in every wire format (NDJSON, BSON with
	// zstd, BSON over WebSocket), by each binary (interleaved; WebSocket by
	// the new one only: an old build may not serve it); the OR-chain
	// baseline in NDJSON only, in-process.
	variants := []drainVariant{
		{drainRowName(d.todos, d.lists, drainShapes[0].name), servers[0], wireNDJSON, false},
		{drainRowName(d.todos, d.lists, drainShapes[0].name+", "+wireBSONZstd.name), servers[0], wireBSONZstd, false},
		{drainRowName(d.todos, d.lists, drainShapes[0].name+", "+wireWebSocket.name), servers[0], wireWebSocket, false},
		{drainRowName(d.todos, d.lists, drainShapes[0].name+", "+wireWSDeflate.name), servers[0], wireWSDeflate, false},
	}
	orChain := drainVariant{drainRowName(d.todos, d.lists, drainShapes[1].name), servers[1], wireNDJSON, true}
	wireBytes := map[string][]int64{}
	cpuRuns := map[string][]drainCPURun{}
	for run := range opt.Runs {
		for _, v := range append(drainRunOrder(variants, lateralServers, run), orChain) {
			timeout := time.Duration(0)
			if v.baseline {
				if cutOff {
					continue
				}
				timeout = opt.BaselineTimeout
			}
			m := v.server.meter(pm)
			m.settle(ctx)
			cpu0 := m.sample()
			st, err := v.server.drainOnce(ctx, timeout, v.wire)
			m.settle(ctx)
			cpu := m.sample().sub(cpu0)
			name := v.name
			if errors.Is(err, errDrainTimeout) {
				// The ops received in the time it ran: the rate of a drain's
				// cheapest part, since later batches reread more.
				cutOff = true
				baseline = name + " (cut off)"
				rows.add(baseline, "", Sample{Duration: st.total, Rows: st.ops, Ops: st.ops, Bytes: st.bytes,
					SyncpipeCPU: cpu.syncpipe, PostgresCPU: cpu.storage})
				notes = append(notes, fmt.Sprintf("%s: cut off after %s with %d of %d ops; its row is the rate of the drain's cheapest "+
					"part (every later batch rereads more), so the LATERAL row's ratio to it understates the difference. Later "+
					"OR-chain runs of this data set were skipped.", name, st.total.Round(time.Second), st.ops, d.ops))
				logf(opt.Log, "run %d: %s: cut off after %s (%d of %d ops)", run+1, name, st.total.Round(time.Second), st.ops, d.ops)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("drain %s: %w", name, err)
			}
			if st.ops != d.ops {
				return nil, fmt.Errorf("drain %s: received %d ops, the data set has %d", name, st.ops, d.ops)
			}
			rows.add(name, "", Sample{Duration: st.total, Rows: st.ops, Ops: st.ops, Bytes: st.bytes,
				SyncpipeCPU: cpu.syncpipe, PostgresCPU: cpu.storage})
			firstCP[name] = append(firstCP[name], st.checkpoint)
			wireBytes[name] = append(wireBytes[name], st.wire)
			cpuRuns[name] = append(cpuRuns[name], drainCPURun{cpu: cpu, wire: st.wire, ops: st.ops})
			logf(opt.Log, "run %d: %s: %s, %.0f ops/s, %.1f MiB/s, %.1f MiB on the wire (checkpoint line after %s); server CPU %s syncpipe, %s storage",
				run+1, name, st.total.Round(time.Millisecond), float64(st.ops)/st.total.Seconds(), float64(st.bytes)/(1<<20)/st.total.Seconds(),
				float64(st.wire)/(1<<20), st.checkpoint.Round(time.Millisecond), cpuText(cpu.syncpipe, m.child > 0), cpuText(cpu.storage, m.postmaster > 0))
		}
	}
	childServed := servers[0].child != nil
	if a, b := wireBytes[variants[0].name], wireBytes[variants[1].name]; len(a) > 0 && len(b) > 0 {
		slices.Sort(a)
		slices.Sort(b)
		ca, cb := medianCPU(cpuRuns[variants[0].name]), medianCPU(cpuRuns[variants[1].name])
		notes = append(notes, fmt.Sprintf("%s: on the wire (median) %.1f MiB as NDJSON without compression, %.1f MiB as BSON with zstd (%.0f%%); "+
			"the BSON+zstd row's MiB/s counts the BSON bytes before compression. Server CPU (median; syncpipe / storage): "+
			"%s / %s as NDJSON, %s / %s as BSON with zstd.", variants[0].name,
			float64(a[len(a)/2])/(1<<20), float64(b[len(b)/2])/(1<<20), 100*float64(b[len(b)/2])/float64(a[len(a)/2]),
			cpuText(ca.syncpipe, childServed), cpuText(ca.storage, pm > 0), cpuText(cb.syncpipe, childServed), cpuText(cb.storage, pm > 0)))
	}
	for _, i := range []int{2, 3} { // WebSocket, without and with deflate
		a, w := wireBytes[variants[0].name], wireBytes[variants[i].name]
		if len(a) == 0 || len(w) == 0 {
			continue
		}
		slices.Sort(w)
		cw := medianCPU(cpuRuns[variants[i].name])
		how := "without compression"
		if variants[i].wire.encoding == "deflate" {
			how = "with per-message deflate (offered as @powersync/node offers it)"
		}
		notes = append(notes, fmt.Sprintf("%s: on the wire (median) %.1f MiB as BSON over WebSocket, %s (%.0f%% of NDJSON's; "+
			"read off the connection, WebSocket framing included), each line sent against the client's REQUEST_N credit "+
			"(10 kept requested, as the SDKs do). Server CPU (median; syncpipe / storage): %s / %s.",
			variants[i].name, float64(w[len(w)/2])/(1<<20), how, 100*float64(w[len(w)/2])/float64(a[len(a)/2]),
			cpuText(cw.syncpipe, childServed), cpuText(cw.storage, pm > 0)))
	}
	for _, v := range variants {
		if runs := cpuRuns[v.name]; len(runs) > 0 && (childServed || pm > 0) {
			*cpuRows = append(*cpuRows, drainCPURow{dataSet: drainDataSet(d.todos, d.lists), wire: v.wire.label(), runs: runs,
				childServed: childServed, storageMeasured: pm > 0})
		}
	}
	// The baseline row is known only now (a cut-off one has its own name).
	if r := rows.byName[drainRowName(d.todos, d.lists, drainShapes[0].name)]; r != nil {
		r.Baseline = baseline
	}
	for _, v := range []int{1, 2, 3} { // BSON with zstd, WebSocket (with deflate): against NDJSON
		if r := rows.byName[variants[v].name]; r != nil {
			r.Baseline = variants[0].name
		}
	}
	for _, sh := range drainShapes {
		name := drainRowName(d.todos, d.lists, sh.name)
		if cps := firstCP[name]; len(cps) > 0 {
			slices.Sort(cps)
			notes = append(notes, fmt.Sprintf("%s: checkpoint line (auth, parameter lookups, cold checksums of %d buckets) after %s (median).",
				name, d.lists+1, cps[len(cps)/2].Round(time.Millisecond)))
		}
	}
	return notes, nil
}

// drainVariant is one drain a run measures: a row, the server and wire
// format it drains, and whether it is the OR-chain baseline (cut off
// after DrainOptions.BaselineTimeout).
type drainVariant struct {
	name     string
	server   *drainServer
	wire     drainWire
	baseline bool
}

// drainBinary is a LATERAL server of one binary; suffix marks its rows.
type drainBinary struct {
	suffix string
	server *drainServer
}

// drainRunOrder is the order of a run's LATERAL drains: each variant,
// drained by each binary, the binaries interleaved (A B, B A, …) so that
// neither always drains first.
func drainRunOrder(variants []drainVariant, binaries []drainBinary, run int) []drainVariant {
	var out []drainVariant
	for _, v := range variants {
		for _, b := range interleaved(binaries, run) {
			if v.wire.ws && b.suffix != "" {
				continue // the old build may have no WebSocket transport
			}
			out = append(out, drainVariant{v.name + b.suffix, b.server, v.wire, v.baseline})
		}
	}
	return out
}

// drainCompareParams describes a comparison run's drains.
func drainCompareParams(h *Harness) string {
	if h == nil || h.Compare == "" {
		return ""
	}
	return h.compareParams() + "; the LATERAL drains (NDJSON and BSON+zstd) are served by two `--role api` children, one per binary, " +
		"on the same storage (data replicated once, in-process); the OR-chain baseline is measured once, in-process; the P4 bars are judged on the new build's rows"
}

func drainServerKind(h *Harness) string {
	if h != nil {
		return "sync API in a `syncpipe run --role api` child process (the OR-chain baseline in-process)"
	}
	return "in-process sync API"
}

func drainRowName(todos, lists int, shape string) string {
	return drainDataSet(todos, lists) + ", " + shape
}

func drainDataSet(todos, lists int) string {
	return fmt.Sprintf("%s todos / %d lists", size(todos), lists)
}

// drainBars decides P4's bars from the LATERAL medians: 1M/1k within 12 s,
// and for each list count, time growing at most 1.1× as fast as ops from
// one todo count to the next tenfold one.
func drainBars(opt DrainOptions, medians map[[2]int]time.Duration) []Bar {
	var bars []Bar
	const measure = "bucket drain through POST /sync/stream"
	if t, ok := medians[[2]int{1_000_000, 1000}]; ok {
		bars = append(bars, Bar{ID: "P4", Measure: measure, Bar: fmt.Sprintf("1M/1k ≤ %d s", drainBarSeconds),
			Value: fmt.Sprintf("1M todos / 1000 lists drained in %.2f s (median)", t.Seconds()),
			Met:   t <= drainBarSeconds*time.Second})
	}
	for _, lists := range opt.Lists {
		for _, lo := range opt.Todos {
			hi := lo * 10
			tlo, ok1 := medians[[2]int{lo, lists}]
			thi, ok2 := medians[[2]int{hi, lists}]
			if !ok1 || !ok2 {
				continue
			}
			opsRatio := float64(hi+lists) / float64(lo+lists)
			timeRatio := thi.Seconds() / tlo.Seconds()
			bars = append(bars, Bar{ID: "P4", Measure: measure, Bar: "10× ops ⇒ ≤ 11× time",
				Value: fmt.Sprintf("%d lists, %s → %s todos: ops ×%.2f, time ×%.2f (%.3f s → %.3f s; allowed ×%.2f)",
					lists, size(lo), size(hi), opsRatio, timeRatio, tlo.Seconds(), thi.Seconds(), 1.1*opsRatio),
				Met: timeRatio <= 1.1*opsRatio})
		}
	}
	return bars
}

// size prints a todo count the way the SPEC does: 10k, 100k, 1M.
func size(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func sizes(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = size(n)
	}
	return "{" + strings.Join(s, ", ") + "}"
}
