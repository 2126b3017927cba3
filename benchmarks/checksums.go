package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	noopmetric "go.opentelemetry.io/otel/metric/noop"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/syncapi"
)

// ChecksumsOptions configures the P5 checksum scenario.
type ChecksumsOptions struct {
	// GlobalRows documents of about RowBytes bytes form the global bucket
	// every client has.
	GlobalRows, RowBytes int
	// Clients connect, each as its own user owning ListsPerUser lists
	// (one small bucket each, through a parameter query) of TodosPerList
	// todos.
	Clients, ListsPerUser, TodosPerList int
	// Ticks incremental checkpoints are measured per mode, after Warmup
	// unmeasured ones; each writes a new version of one document and of
	// TodosPerTick todos (1 + TodosPerTick changed buckets) as one
	// transaction, Interval apart (0: as soon as every client completed
	// the previous one).
	Ticks, Warmup, TodosPerTick int
	Interval                    time.Duration
	// Streams serves the same data as Sync Streams: the global bucket an
	// auto-subscribed stream, and each of a client's lists a subscription
	// to a parameterised stream (ListsPerUser subscriptions per client).
	Streams bool
	Log     io.Writer
	// Harness, if set, adds a mode with the sync API in a `syncpipe run
	// --role api` child process (change records on), for the API's own
	// latency and peak RSS (P6); its query counts stay inside the child.
	Harness *Harness
}

// ChecksumsPreset returns the options for a scale: "full" is SPEC §9 P5
// (200k × 1 KB global rows, 100 clients × 400 buckets, one update a
// second); "small" runs in well under a minute.
func ChecksumsPreset(scale string) ChecksumsOptions {
	if scale == "full" {
		return ChecksumsOptions{GlobalRows: 200_000, RowBytes: 1024, Clients: 100, ListsPerUser: 400, TodosPerList: 1,
			Ticks: 30, Warmup: 2, TodosPerTick: 1, Interval: time.Second}
	}
	return ChecksumsOptions{GlobalRows: 20_000, RowBytes: 1024, Clients: 20, ListsPerUser: 400, TodosPerList: 1,
		Ticks: 10, Warmup: 2, TodosPerTick: 1, Interval: time.Second}
}

// ChecksumsStreamsPreset is ChecksumsPreset for the Sync Streams variant:
// 100 clients (full) each subscribed to 10 parameterised streams.
func ChecksumsStreamsPreset(scale string) ChecksumsOptions {
	opt := ChecksumsPreset(scale)
	opt.ListsPerUser, opt.Streams = 10, true
	return opt
}

// p5Mode is one measured configuration of the sync API.
type p5Mode struct {
	name  string
	off   bool // DisableChangeRecords: the per-client path
	child bool // served by a syncpipe child: no query counts
}

var p5Modes = []p5Mode{
	{name: "change records on"},
	{name: "baseline: change records off (per-client checksums and parameter queries)", off: true},
}

// p5ChildMode runs when the options carry a harness.
var p5ChildMode = p5Mode{name: "change records on, API in a `syncpipe run --role api` child", child: true}

// p5Tick is what one incremental checkpoint cost and how fast it reached
// the clients.
type p5Tick struct {
	changed                                    int // buckets the write changed
	queries, summed, carried, changeQ, paramsQ int64
	diff, complete                             []time.Duration // per client, from just before the commit
}

// p5Figures are a mode's ticks, for the report and the smoke test.
type p5Figures struct {
	mode    p5Mode
	ticks   []p5Tick
	peakRSS int64 // of a child API process
	streams bool  // the Sync Streams variant
}

// RunChecksums measures SPEC §9 P5: clients connected over HTTP to the
// sync API while one small write per tick changes the global bucket and a
// user's bucket. Per incremental checkpoint it counts checksum queries,
// buckets summed and parameter queries, and the latency from the storage
// checkpoint commit to each client's checkpoint_diff and
// checkpoint_complete — with the checksum cache's change-record path on
// and, in the same run on the same data, off (every client sums its own
// buckets and re-reads its parameter lookups at every checkpoint).
func RunChecksums(ctx context.Context, opt ChecksumsOptions) (Result, error) {
	res, _, err := runChecksums(ctx, opt)
	return res, err
}

func runChecksums(ctx context.Context, opt ChecksumsOptions) (Result, []p5Figures, error) {
	scenario, how := "checksums", "parameter query"
	if opt.Streams {
		scenario, how = "checksums-streams", "Sync Streams: the global bucket an auto-subscribed stream, each list a subscription to a parameterised stream checked against the user's lists by a subquery"
	}
	res := Result{Scenario: scenario, Date: time.Now(),
		Params: fmt.Sprintf("P5: global bucket of %d × %d B rows; %d clients over HTTP, each a user with %d buckets of %d rows (%s); "+
			"per tick one transaction updates 1 document + %d todo(s), %s apart; %d measured checkpoints per mode after %d warm-up; "+
			"written through a bucketstore Writer (no replication), throwaway cluster, storage synchronous_commit=off; clients accept gzip (Go's transport). "+
			"In the table a sample is one checkpoint: time = commit → the last client's checkpoint_complete, rows = clients, ops = buckets summed",
			opt.GlobalRows, opt.RowBytes, opt.Clients, opt.ListsPerUser, opt.TodosPerList, how, opt.TodosPerTick, opt.Interval, opt.Ticks, opt.Warmup)}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
	if err != nil {
		return res, nil, err
	}
	defer cluster.Stop()
	if err := cluster.CreateDatabase(ctx, "storage"); err != nil {
		return res, nil, err
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: cluster.URI("storage"), MaxConns: 40, SynchronousCommit: "off"})
	if err != nil {
		return res, nil, err
	}
	defer store.Close()
	data, err := newP5Data(ctx, store, opt)
	if err != nil {
		return res, nil, err
	}
	defer data.close()
	logf(opt.Log, "P5: loading %d rows…", data.rowsTotal())
	start := time.Now()
	last, err := data.load(ctx)
	if err != nil {
		return res, nil, fmt.Errorf("load P5 data: %w", err)
	}
	d := &p5Driver{data: data, lsn: 0x1000000, harness: opt.Harness, storeURI: cluster.URI("storage")}
	if _, err := d.commit(ctx, last); err != nil {
		return res, nil, err
	}
	logf(opt.Log, "P5: loaded in %s", time.Since(start).Round(time.Millisecond))

	var rows rowSet
	var figs []p5Figures
	modes := p5Modes
	if opt.Harness != nil {
		modes = append(slices.Clone(modes), p5ChildMode)
	}
	for _, m := range modes {
		f, err := d.runMode(ctx, m)
		if err != nil {
			return res, figs, fmt.Errorf("%s: %w", m.name, err)
		}
		figs = append(figs, f)
		res.PeakRSS = max(res.PeakRSS, f.peakRSS)
		for _, t := range f.ticks {
			rows.add(m.name, "", Sample{Duration: slices.Max(t.complete), Rows: int64(len(t.complete)), Ops: t.summed})
		}
	}
	res.Rows = rows.list()
	res.Notes = append(res.Notes, p5Report(figs))
	res.Bars = append(res.Bars, p5Bar(figs))
	return res, figs, nil
}

// p5Driver writes the ticks and publishes their checkpoints.
type p5Driver struct {
	data     *p5Data
	lsn      uint64
	tick     int
	harness  *Harness
	storeURI string // for a child API
}

func (d *p5Driver) commit(ctx context.Context, op int64) (bucketstore.Checkpoint, error) {
	d.lsn += 16
	cp, ok, err := d.data.store.Writes().Commit(ctx, d.data.group, pglogrepl.LSN(d.lsn), op)
	if err == nil && !ok {
		err = errors.New("checkpoint not published")
	}
	if err != nil {
		return cp, fmt.Errorf("commit checkpoint at op %d: %w", op, err)
	}
	return cp, nil
}

// runMode starts a sync API server, connects the clients, waits for their
// first sync and then measures Warmup + Ticks incremental checkpoints.
// The figures are a named result: a child's peak RSS is known only once
// the deferred stop has run.
func (d *p5Driver) runMode(ctx context.Context, m p5Mode) (fig p5Figures, err error) {
	opt := d.data.opt
	fig = p5Figures{mode: m, streams: opt.Streams}
	cp, _, ok, err := d.data.store.Reader().ActiveCheckpoint(ctx)
	if err != nil || !ok {
		return fig, fmt.Errorf("no active checkpoint (%v)", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	var clients sync.WaitGroup
	var srv *syncapi.Server
	var url string
	if m.child {
		child, u, err := d.harness.startAPIChild(ctx, apiChildConfig{Storage: d.storeURI, Secret: p5Secret, Audience: p5Audience,
			MaxConnections: opt.Clients + 10})
		if err != nil {
			cancel()
			return fig, err
		}
		url = u
		defer func() {
			cancel()
			clients.Wait()
			st, _ := child.Stop()
			fig.peakRSS = st.PeakRSS
		}()
	} else {
		srv, err = syncapi.New(sctx, syncapi.Config{Groups: d.data.store.Catalog(), Store: d.data.store.Reader(), Sources: d.data.store.Reader(), Baseline: syncapi.Baseline{IgnoreChangeRecords: m.off},
			Auth:          config.Auth{Audience: []string{p5Audience}, HS256Secrets: []string{p5Secret}, MaxLifetime: 24 * time.Hour},
			MeterProvider: noopmetric.NewMeterProvider(), MaxConcurrentConnections: opt.Clients + 10})
		if err != nil {
			cancel()
			return fig, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			cancel()
			srv.Close()
			return fig, err
		}
		hs := &http.Server{Handler: srv.Handler()}
		go func() { _ = hs.Serve(ln) }()
		defer func() {
			cancel()
			srv.Close()
			_ = hs.Close()
			clients.Wait()
		}()
		url = "http://" + ln.Addr().String()
	}
	rec := newP5Arrivals()
	for u := range opt.Clients {
		clients.Go(func() { runP5Client(sctx, url, p5User(u), d.data.global(), cp.OpID, d.data.subscriptions(u), rec) })
	}
	logf(opt.Log, "P5 %s: %d clients syncing at checkpoint %d…", m.name, opt.Clients, cp.OpID)
	if err := rec.waitComplete(ctx, cp.OpID, opt.Clients, 10*time.Minute); err != nil {
		return fig, fmt.Errorf("first sync: %w", err)
	}
	next := time.Now()
	for i := range opt.Warmup + opt.Ticks {
		if wait := time.Until(next); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return fig, ctx.Err()
			}
		}
		next = time.Now().Add(opt.Interval)
		t, err := d.measure(ctx, srv, rec)
		if err != nil {
			return fig, err
		}
		if i >= opt.Warmup {
			fig.ticks = append(fig.ticks, t)
		}
	}
	q, l := fig.summary()
	queries := fmt.Sprintf("median %v max %v", q.med, q.max)
	if m.child {
		queries = "counted inside the child"
	}
	logf(opt.Log, "P5 %s: checksum queries per checkpoint %s; complete p50 %s p99 %s", m.name, queries, l.p50, l.p99)
	return fig, nil
}

// measure runs one tick: the write, the commit, and the wait until every
// client completed the new checkpoint.
func (d *p5Driver) measure(ctx context.Context, srv *syncapi.Server, rec *p5Arrivals) (p5Tick, error) {
	d.tick++
	op, changed, err := d.data.update(ctx, d.tick, d.data.opt.TodosPerTick)
	if err != nil {
		return p5Tick{}, fmt.Errorf("tick %d: write: %w", d.tick, err)
	}
	var c0 bucketstore.ChecksumStats
	if srv != nil {
		c0 = srv.ChecksumStats()
	}
	p0 := d.data.store.Writes().Stats().ParameterQueries
	t0 := time.Now() // before the commit: the latency includes it
	cp, err := d.commit(ctx, op)
	if err != nil {
		return p5Tick{}, err
	}
	if err := rec.waitComplete(ctx, cp.OpID, d.data.opt.Clients, time.Minute); err != nil {
		return p5Tick{}, fmt.Errorf("tick %d: %w", d.tick, err)
	}
	t := p5Tick{changed: changed}
	if srv != nil {
		c1, p1 := srv.ChecksumStats(), d.data.store.Writes().Stats().ParameterQueries
		t.queries, t.summed, t.carried = c1.Queries-c0.Queries, c1.Misses-c0.Misses, c1.Carried-c0.Carried
		t.changeQ, t.paramsQ = c1.ChangeQueries-c0.ChangeQueries, p1-p0
	}
	diff, complete := rec.times(cp.OpID)
	for _, at := range diff {
		t.diff = append(t.diff, at.Sub(t0))
	}
	for _, at := range complete {
		t.complete = append(t.complete, at.Sub(t0))
	}
	return t, nil
}

// p5Stat is a median and a maximum.
type p5Stat struct{ med, max float64 }

// p5Latency is a distribution's percentiles.
type p5Latency struct{ p50, p99, max time.Duration }

func p5StatOf(v []float64) p5Stat {
	if len(v) == 0 {
		return p5Stat{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return p5Stat{s[len(s)/2], s[len(s)-1]}
}

func p5LatencyOf(v []time.Duration) p5Latency {
	if len(v) == 0 {
		return p5Latency{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(int(p*float64(len(s))), len(s)-1)] }
	return p5Latency{at(0.50).Round(10 * time.Microsecond), at(0.99).Round(10 * time.Microsecond), s[len(s)-1].Round(10 * time.Microsecond)}
}

// per collects one figure per tick.
func (f p5Figures) per(g func(p5Tick) float64) p5Stat {
	var v []float64
	for _, t := range f.ticks {
		v = append(v, g(t))
	}
	return p5StatOf(v)
}

func (f p5Figures) latencies(g func(p5Tick) []time.Duration) p5Latency {
	var v []time.Duration
	for _, t := range f.ticks {
		v = append(v, g(t)...)
	}
	return p5LatencyOf(v)
}

// summary is the checksum queries per checkpoint and the complete latency.
func (f p5Figures) summary() (p5Stat, p5Latency) {
	return f.per(func(t p5Tick) float64 { return float64(t.queries) }), f.latencies(func(t p5Tick) []time.Duration { return t.complete })
}

// p5Report renders the per-checkpoint figures of every mode.
func p5Report(figs []p5Figures) string {
	var b strings.Builder
	b.WriteString("Per incremental checkpoint (median / max over the measured checkpoints; latencies over every client of every checkpoint, " +
		"from just before the storage checkpoint commit):\n\n")
	b.WriteString("| mode | checkpoints | changed buckets | checksum queries | buckets summed | buckets carried (no query) | change record queries | parameter queries | → checkpoint_diff p50 / p99 / max | → checkpoint_complete p50 / p99 / max |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, f := range figs {
		mm := func(g func(p5Tick) int64) string {
			if f.mode.child {
				return "—" // counted inside the child
			}
			s := f.per(func(t p5Tick) float64 { return float64(g(t)) })
			return fmt.Sprintf("%.0f / %.0f", s.med, s.max)
		}
		ds, cs := f.latencies(func(t p5Tick) []time.Duration { return t.diff }), f.latencies(func(t p5Tick) []time.Duration { return t.complete })
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s / %s |\n", f.mode.name, len(f.ticks),
			fmt.Sprintf("%.0f / %.0f", f.per(func(t p5Tick) float64 { return float64(t.changed) }).med,
				f.per(func(t p5Tick) float64 { return float64(t.changed) }).max), mm(func(t p5Tick) int64 { return t.queries }),
			mm(func(t p5Tick) int64 { return t.summed }), mm(func(t p5Tick) int64 { return t.carried }),
			mm(func(t p5Tick) int64 { return t.changeQ }), mm(func(t p5Tick) int64 { return t.paramsQ }),
			ds.p50, ds.p99, ds.max, cs.p50, cs.p99, cs.max)
	}
	return b.String()
}

// p5Bar decides SPEC §9 P5 on the change-records mode: at most one
// checksum query per changed bucket at every checkpoint (counted
// in-process), and p99 of the commit → checkpoint_complete latency under
// 50 ms — in-process and, when measured, from the API child process too.
func p5Bar(figs []p5Figures) Bar {
	f := figs[0]
	worst := 0.0
	for _, t := range f.ticks {
		worst = max(worst, float64(t.queries)/float64(max(t.changed, 1)))
	}
	_, l := f.summary()
	id, measure := "P5", "checksums, 100 clients, small updates"
	if f.streams {
		id, measure = "P5-streams", "checksums on Sync Streams, 100 clients × 10 subscriptions, small updates"
	}
	bar := Bar{ID: id, Measure: measure,
		Bar:   "≤ 1 checksum query per changed bucket per checkpoint; p99 < 50 ms",
		Value: fmt.Sprintf("max %.2f checksum queries per changed bucket; commit → checkpoint_complete p99 %s", worst, l.p99),
		Met:   worst <= 1 && l.p99 < 50*time.Millisecond && len(f.ticks) > 0}
	for _, c := range figs[1:] {
		if c.mode.child {
			_, cl := c.summary()
			bar.Value += fmt.Sprintf(" (API in a syncpipe child: p99 %s)", cl.p99)
			bar.Met = bar.Met && cl.p99 < 50*time.Millisecond && len(c.ticks) > 0
		}
	}
	return bar
}
