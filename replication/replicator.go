package replication

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// Priorities of work units (SPEC §5): lower runs first. A group's stream
// runs one after its snapshots (stream.go: g.prio + 1), so the active
// group's stream is 2 and a processing group's is prioProcessingStream.
const (
	prioActiveSnapshot     = 1
	prioProcessingSnapshot = 3
	prioProcessingStream   = 4
)

// Options configures a Replicator.
type Options struct {
	Config *config.Config
	Store  *bucketstore.Store
	Logger *slog.Logger
	// Tracer receives every stage of every batch (OTel adapter, summary).
	Tracer pipeline.StageTracer
	// Role limits the work: "all" or "replication" run everything,
	// "replication:snapshot" only snapshots, "replication:streaming" only
	// streams.
	Role string
	// OnSnapshotDone, if set, is called when a group's snapshot finished.
	OnSnapshotDone func(group int)
	// WrapSink, if set, wraps the storage sink of every pipeline, for
	// instrumentation (and tests that slow storage down).
	WrapSink func(sinks.Sink) sinks.Sink
	// Terminal, if set, gets a live one-line snapshot progress display
	// (pass stderr when it is a terminal).
	Terminal io.Writer
	// ProgressEvery is the interval of snapshot progress log lines
	// (default 10s).
	ProgressEvery time.Duration
	// MeterProvider creates the replication metrics; default the OTel
	// global.
	MeterProvider metric.MeterProvider
	// Reload, when set, asks for the sync rules to be read again (run
	// sends on SIGHUP): changed rules start a reprocessing group in the
	// background, which takes over once caught up.
	Reload <-chan struct{}
	// RulesWarnings are what the start-up check of the configured rules
	// against the source warned of (nil: not checked), stored with the
	// rules' group for status; a reload stores its own.
	RulesWarnings []string
}

// sink returns the sink snapshot pipelines of group g write to, fenced
// with the unit's lease: each write and commit bounded by
// replication.storage_timeout.
func (r *Replicator) sink(g *group, f bucketstore.Fence) sinks.Sink {
	var s sinks.Sink = r.writes.FencedSink(g.g.ID, f)
	if r.opts.WrapSink != nil {
		s = r.opts.WrapSink(s)
	}
	return timeoutSink{Sink: s, r: r, yield: r.snapshotYield(g)}
}

// timeoutSink bounds every Write and Commit of the sink it wraps: a storage
// that stops answering fails the unit, which is retried, instead of
// stalling it forever.
type timeoutSink struct {
	sinks.Sink
	r *Replicator
	// yield, when set, runs before each write: a reprocessing snapshot's
	// storage writes wait too while an active stream lags (see
	// yieldToActiveStreams).
	yield func(context.Context) error
}

func (s timeoutSink) Writer(ctx context.Context, i int) (sinks.Writer, error) {
	w, err := s.Sink.Writer(ctx, i)
	if err != nil {
		return nil, err
	}
	return pipeline.WriterFunc[model.Change, sinks.Position](func(ctx context.Context, b sinks.Batch) error {
		if s.yield != nil {
			if err := s.yield(ctx); err != nil {
				return err
			}
		}
		ctx, cancel := s.r.storageCtx(ctx)
		defer cancel()
		return w.Write(ctx, b)
	}), nil
}

func (s timeoutSink) Commit(ctx context.Context, b sinks.Batch) error {
	ctx, cancel := s.r.storageCtx(ctx)
	defer cancel()
	return s.Sink.Commit(ctx, b)
}

// timeoutStream is timeoutSink for a group's stream: the bucketstore
// sink's ordered stream writer, its read-ahead and its publishing commit
// (sinks.OrderedStream, Preparer, Publisher), each bounded the same way.
type timeoutStream struct {
	timeoutSink
	bs *bucketstore.Sink
}

func (r *Replicator) streamSink(bs *bucketstore.Sink) timeoutStream {
	return timeoutStream{timeoutSink: timeoutSink{Sink: bs, r: r}, bs: bs}
}

func (s timeoutStream) StreamWriter(ctx context.Context) (sinks.Writer, error) {
	w, err := s.bs.StreamWriter(ctx)
	if err != nil {
		return nil, err
	}
	p, ok := w.(sinks.Preparer)
	if !ok {
		return nil, errors.New("the bucketstore stream writer reads nothing ahead")
	}
	return timeoutStreamWriter{w: w, p: p, r: s.r}, nil
}

func (s timeoutStream) CommitPublish(ctx context.Context, b sinks.Batch) (bool, error) {
	ctx, cancel := s.r.storageCtx(ctx)
	defer cancel()
	return s.bs.CommitPublish(ctx, b)
}

// timeoutStreamWriter bounds the stream writer's Prepare and Write.
type timeoutStreamWriter struct {
	w sinks.Writer
	p sinks.Preparer
	r *Replicator
}

func (w timeoutStreamWriter) Prepare(ctx context.Context, b sinks.Batch) (sinks.Batch, error) {
	ctx, cancel := w.r.storageCtx(ctx)
	defer cancel()
	return w.p.Prepare(ctx, b)
}

func (w timeoutStreamWriter) Write(ctx context.Context, b sinks.Batch) error {
	ctx, cancel := w.r.storageCtx(ctx)
	defer cancel()
	return w.w.Write(ctx, b)
}

// Replicator runs replication for the configured sync rules.
type Replicator struct {
	opts Options
	cfg  *config.Config
	// pl is the pipeline replication runs: the config's bucketstore
	// pipeline, with its source, tables and stage settings resolved.
	pl    config.Pipeline
	log   *slog.Logger
	sched *pipeline.Scheduler
	owner string
	// claims holds the snapshot units' leases (claims.go).
	claims *snapshotClaims

	// The roles of bucket storage, each as the small interface its code
	// calls (storage.go): the write path's writes, source tables and
	// fences; deploying, retiring and compacting groups' catalog, errors,
	// leases and maintenance.
	writes       groupWrites
	sourceTables tableCatalog
	fences       fenceStore
	catalog      groupCatalog
	groupErrs    groupErrors
	leases       leaseStore
	maint        maintenance

	progress *progress
	// toastMerged and toastReread count UPDATEs whose unchanged TOAST
	// values came from stored row data and from a source re-read.
	toastMerged, toastReread atomic.Int64

	errs    *errorState
	metrics *replMetrics

	// runCtx and bg are Run's context and its background goroutines
	// (background).
	runCtx context.Context
	bg     sync.WaitGroup

	mu       sync.Mutex
	groups   map[int]*group
	retiring map[int]bool // groups being retired
	waiting  map[int]bool // groups whose start waits for the source (startWhenReachable)

	// hooks are set by the package's tests only, before Run.
	hooks testHooks
}

// testHooks let in-process tests stop a replicator at a chosen step, as
// the end-to-end tests stop a process with SIGSTOP. Nil: nothing.
type testHooks struct {
	// beforeRenew runs before each lease renewal of a heartbeat.
	beforeRenew func(ctx context.Context, lease string)
	// streamResumed runs when a stream attempt has read its progress from
	// storage, before it connects to the source.
	streamResumed func(ctx context.Context, group int)
}

// New returns a replicator; Run starts it.
func New(opts Options) *Replicator {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	pl, _ := opts.Config.BucketstorePipeline()
	opts.Tracer = withStageMetrics(opts.Tracer, mp, pl.Name) // stage and row metrics (metrics.go)
	r := &Replicator{opts: opts, cfg: opts.Config, pl: pl, log: log, errs: newErrorState(mp), metrics: newReplMetrics(mp),
		owner: processOwner(), groups: map[int]*group{}, waiting: map[int]bool{}, progress: newProgress()}
	r.setStorage(opts.Store)
	lc := opts.Config.Replication.Lease
	r.claims = newSnapshotClaims(opts.Store.Leases(), r.owner, lc.Duration, lc.Heartbeat, func(l bucketstore.Lease) {
		r.metrics.leaseAcquired(context.Background(), l.Name, l.Takeover)
	})
	return r
}

// processOwner names this process in leases: host and pid for the
// operator, and a random part, because a restarted container often has the
// same of both and must not pass for its dead predecessor.
func processOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), rand.Text()[:8])
}

// group is the replication state of one group in this process.
type group struct {
	g      bucketstore.Group
	rules  *syncrules.Rules
	tables []*table
	prio   int // snapshot priority; stream is prio+1

	mu        sync.Mutex
	remaining int // snapshot ranges not yet done
}

// timeStyle is how the group's rules render temporal values (rulesBinder).
func (g *group) timeStyle() postgres.TimeStyle { return timeStyle(g.rules) }

// spec binds the group's rules to a table's columns (see rulesBinder).
func (g *group) spec(t *model.Table, columns, identity []string) (*stages.TableSpec, error) {
	return stages.NewTableSpec(t, g.rules, columns, identity)
}

// state is the group's state as last seen in storage.
func (g *group) state() bucketstore.State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.g.State
}

// setState records a state change of the group seen in storage.
func (g *group) setState(s bucketstore.State) {
	g.mu.Lock()
	g.g.State = s
	g.mu.Unlock()
}

// table is one replicated source table of a group.
type table struct {
	info   postgres.TableInfo
	stored bucketstore.SourceTable
	spec   *stages.TableSpec

	mu        sync.Mutex
	remaining int // ranges of this table not yet done
}

// Run replicates until ctx ends (then it returns nil) or a unit fails.
func (r *Replicator) Run(ctx context.Context) error {
	if r.pl.Name == "" {
		return errors.New("no pipeline writes to bucket storage: declare one with sink bucketstore")
	}
	rulesText, err := r.cfg.SyncRules.Read()
	if err != nil {
		return err
	}
	var groups []bucketstore.Group
	err = r.atStart(ctx, "read the replication groups", func(ctx context.Context) (err error) {
		groups, err = r.catalog.EnsureGroup(ctx, string(rulesText), r.pl.Source.SlotPrefix)
		return err
	})
	if err != nil {
		return err
	}
	if r.opts.RulesWarnings != nil {
		if err := r.catalog.SetRulesWarnings(ctx, string(rulesText), r.opts.RulesWarnings); err != nil {
			r.log.Warn("sync rules' warnings not stored for status", "err", err)
		}
	}
	r.sched = pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: max(r.cfg.Replication.WorkersPerProcess, 1)})
	every := r.opts.ProgressEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	pctx, stopProgress := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer r.bg.Wait()
	defer stopProgress()
	r.runCtx = pctx
	r.background(r.claims.keep)
	defer r.metrics.observe(r.errs)()
	wg.Go(func() { r.progress.run(pctx, r.log, r.opts.Terminal, every) })
	for _, g := range groups {
		err := r.atStart(ctx, fmt.Sprintf("start group %d", g.ID), func(ctx context.Context) error { return r.startGroup(ctx, g) })
		switch {
		case errors.Is(err, errSourceDown) && ctx.Err() == nil:
			r.startWhenReachable(ctx, g, err)
		case err != nil:
			return fmt.Errorf("group %d: %w", g.ID, err)
		case strings.HasPrefix(g.LastError, sourceUnreachable):
			r.clearStale(ctx, g.ID)
		}
	}
	if err := r.atStart(ctx, "find groups to retire", r.submitRetirements); err != nil {
		return err
	}
	if r.opts.Reload != nil {
		r.background(r.reloads)
	}
	if r.cfg.Replication.Compaction.Interval > 0 {
		r.background(r.compactions)
	}
	if err := r.sched.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil // stopped: a shutdown, not a failure
}

// reloads applies every reload request until ctx ends. A rules file that
// does not parse, or groups that cannot be started, are logged and leave
// replication as it is: bad input stops nothing.
func (r *Replicator) reloads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.opts.Reload:
		}
		if err := r.reload(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("sync rules not reloaded; replication goes on with the rules it has", "err", err)
		}
	}
}

// reload reads the rules again and starts the groups storage now wants
// that this process does not run yet (a reprocessing group for changed
// rules). A PROCESSING group of earlier rules is stopped by EnsureGroup
// and retires itself.
func (r *Replicator) reload(ctx context.Context) error {
	rulesText, err := r.cfg.SyncRules.Read()
	if err != nil {
		return err
	}
	rules, err := syncrules.Parse(rulesText, syncrules.Options{File: r.cfg.SyncRules.Path})
	if err != nil {
		return err
	}
	// Judged as validate and start-up judge rules (CheckSource): what
	// replication would refuse refuses the new rules, while the old ones
	// go on; what the source lacks is said before they apply — a
	// misspelled column would otherwise drop a field from every client
	// silently.
	rep, err := CheckSource(ctx, r.cfg, []config.Pipeline{r.pl}, rules, r.cfg.Source.ConnectTimeout)
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return errors.Join(rep.Problems...)
	}
	warnings := rep.LogWarnings(r.log, rules)
	// Before a group of the new rules exists: rules the source cannot
	// replicate leave nothing behind, and a table they add is in the
	// publication before the new group's slot is created (its changes in
	// between would not be published).
	conn, err := r.connectSource(ctx)
	if err != nil {
		return err
	}
	err = postgres.Preflight(ctx, conn, postgres.PreflightOptions{Publication: r.pl.Source.Publication, Tables: r.tables(rules), CreatePublication: true})
	closeConn(conn)
	if err != nil {
		return err
	}
	groups, err := r.catalog.EnsureGroup(ctx, string(rulesText), r.pl.Source.SlotPrefix)
	if err != nil {
		return err
	}
	if err := r.catalog.SetRulesWarnings(ctx, string(rulesText), warnings); err != nil {
		return err
	}
	for _, g := range groups {
		r.mu.Lock()
		_, running := r.groups[g.ID]
		running = running || r.waiting[g.ID]
		r.mu.Unlock()
		if running {
			continue
		}
		r.log.Info("sync rules changed: starting a reprocessing group", "group", g.ID)
		if err := r.startGroup(ctx, g); err != nil {
			return fmt.Errorf("group %d: %w", g.ID, err)
		}
	}
	return nil
}

// background runs f on a goroutine that Run waits for; f's ctx ends when
// Run stops.
func (r *Replicator) background(f func(ctx context.Context)) {
	r.bg.Go(func() { f(r.runCtx) })
}

// connectSource opens a connection to the source; a source that does not
// answer is errSourceDown.
func (r *Replicator) connectSource(ctx context.Context) (*pgx.Conn, error) {
	conn, err := postgres.Connect(ctx, r.pl.Source.URI, r.cfg.Source.ConnectTimeout)
	if err != nil {
		return nil, sourceDown(err)
	}
	return conn, nil
}

// startWhenReachable starts group g in the background once the source
// answers: its start at Run found the source down (cause). Meanwhile the
// API serves what storage holds, and the group's stored error says why
// replication waits (status, /healthz degraded) until the group has
// started. The start is retried as a unit, with backoff: discovery,
// preflight and the slot all run then.
func (r *Replicator) startWhenReachable(ctx context.Context, g bucketstore.Group, cause error) {
	unit := fmt.Sprintf("group %d start", g.ID)
	r.report(ctx, g.ID, unit, fmt.Errorf("%s%w (replication starts when it answers; the API serves what storage holds)", sourceUnreachable, cause))
	r.mu.Lock()
	r.waiting[g.ID] = true
	r.mu.Unlock()
	r.background(func(ctx context.Context) {
		defer func() {
			r.mu.Lock()
			delete(r.waiting, g.ID)
			r.mu.Unlock()
		}()
		err := r.retry(ctx, g.ID, unit, "start", func(ctx context.Context) error { return r.startGroup(ctx, g) })
		switch {
		case ctx.Err() != nil:
		case err != nil:
			r.log.Error("replication group not started", "group", g.ID, "err", err)
		default:
			r.log.Info("source reachable: replication group started", "group", g.ID)
			r.recovered(ctx, g.ID) // the source answers: the stored "source unreachable" no longer holds
		}
	})
}

// sourceUnreachable starts the error startWhenReachable stores.
const sourceUnreachable = "source unreachable: "

// clearStale clears group's stored "source unreachable" error, which an
// earlier process stored (this one's is cleared by recovered) and which
// no longer holds: this process has just started the group from the
// source.
func (r *Replicator) clearStale(ctx context.Context, group int) {
	if err := r.groupErrs.ClearError(ctx, group); err != nil {
		r.log.Warn("could not clear the replication error", "group", group, "err", err)
		return
	}
	r.log.Info("source reachable: cleared the group's stored error", "group", group)
}

// startGroup prepares a group and submits its work units.
func (r *Replicator) startGroup(ctx context.Context, bg bucketstore.Group) error {
	rules, err := syncrules.Parse([]byte(bg.Rules), syncrules.Options{File: "sync rules", GroupID: strconv.Itoa(bg.ID)})
	if err != nil {
		return err
	}
	g := &group{g: bg, rules: rules, prio: prioActiveSnapshot}
	if bg.State == bucketstore.StateProcessing {
		g.prio = prioProcessingSnapshot
		if !r.hasActive(ctx) {
			g.prio = prioActiveSnapshot // nothing serves yet: this group is the urgent one
		}
	}
	conn, err := r.connectSource(ctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)

	names := r.tables(rules)
	if err := postgres.Preflight(ctx, conn, postgres.PreflightOptions{Publication: r.pl.Source.Publication, Tables: names, CreatePublication: true}); err != nil {
		return err
	}
	infos, err := discover(ctx, conn, names, g.rules)
	if err != nil {
		return err
	}
	if err := r.ensureSlot(ctx, g); slotGone(err) {
		return r.replace(ctx, g, err)
	} else if err != nil {
		return err
	}
	if g.tables, err = r.registerTables(ctx, g, infos); err != nil {
		return err
	}
	r.mu.Lock()
	r.groups[bg.ID] = g
	r.mu.Unlock()
	return r.submitSnapshots(ctx, conn, g)
}

func (r *Replicator) hasActive(ctx context.Context) bool {
	gs, err := r.catalog.Groups(ctx)
	if err != nil {
		return false
	}
	for _, g := range gs {
		if g.State == bucketstore.StateActive {
			return true
		}
	}
	return false
}

// slotCreateWait bounds how long a process waits for the group's slot that
// another process is creating (the source makes a new logical slot wait
// for the transactions running then); past it, the start fails and is
// retried.
const slotCreateWait = 5 * time.Minute

// ensureSlot creates the group's slot unless it exists. A slot that is
// gone after the snapshot finished cannot be recreated without losing
// changes: that is reported for a new group to be started.
func (r *Replicator) ensureSlot(ctx context.Context, g *group) error {
	conn, err := logrepl.Connect(ctx, r.replicationURI(false))
	if err != nil {
		return sourceDown(err)
	}
	defer func() {
		cctx, cancel := closeCtx()
		conn.Close(cctx)
		cancel()
	}()
	// A slot another process is creating is listed before it is ready;
	// reading the snapshot before its consistent point would lose the
	// changes committed in between (neither read nor streamed).
	wctx, cancel := context.WithTimeout(ctx, slotCreateWait)
	defer cancel()
	slot, err := logrepl.AwaitSlot(wctx, conn, g.g.SlotName)
	if err == nil {
		if slot.WALStatus == "lost" {
			return fmt.Errorf("replication slot %s was invalidated (wal_status=lost, see max_slot_wal_keep_size): %w", g.g.SlotName, logrepl.ErrSlotLost)
		}
		return nil
	}
	if err != nil && !errors.Is(err, logrepl.ErrSlotMissing) {
		return err
	}
	// Snapshot chunks already stored are only consistent with changes
	// from the slot they were read under; a new slot starts later.
	started, err := r.catalog.SnapshotStarted(ctx, g.g.ID)
	if err != nil {
		return err
	}
	if started {
		return fmt.Errorf("replication slot %s is missing after the snapshot started: %w", g.g.SlotName, logrepl.ErrSlotMissing)
	}
	if _, err := logrepl.CreateSlot(ctx, conn, g.g.SlotName); err != nil {
		return err
	}
	r.log.Info("created replication slot", "group", g.g.ID, "slot", g.g.SlotName)
	return nil
}

// registerTables records the group's tables in storage, with the shape
// the snapshot reads each in (the stream compares every relation with it;
// a table stored before shapes were kept takes the source's current one),
// and binds the rules to each.
func (r *Replicator) registerTables(ctx context.Context, g *group, infos []postgres.TableInfo) ([]*table, error) {
	regs := make([]bucketstore.TableRegistration, len(infos))
	for i, info := range infos {
		regs[i] = bucketstore.TableRegistration{RelationID: info.OID, Schema: info.Schema, Name: info.Name,
			ReplicaIDColumns: identityNames(info), Shape: marshalShape(postgres.CatalogShape(info))}
	}
	stored, err := r.catalog.RegisterTables(ctx, g.g.ID, regs)
	if err != nil {
		return nil, err
	}
	tables := make([]*table, len(infos))
	for i, info := range infos {
		st := stored[i]
		spec, err := tableSpec(&st.Table, g.rules, info)
		if err != nil {
			return nil, err
		}
		tables[i] = &table{info: info, stored: st, spec: spec}
	}
	return tables, nil
}

// identityNames returns the names of the table's replica identity columns.
func identityNames(info postgres.TableInfo) []string {
	identity := make([]string, len(info.IdentityColumns))
	for i, c := range info.IdentityColumns {
		identity[i] = info.Columns[c].Name
	}
	return identity
}

// tableSpec binds the rules to a discovered table and marks its TOASTable
// columns, whose values big rows then keep in storage for merging updates
// that omit them.
func tableSpec(t *model.Table, rules *syncrules.Rules, info postgres.TableInfo) (*stages.TableSpec, error) {
	cols := make([]string, len(info.Columns))
	var toast []int
	for i, c := range info.Columns {
		cols[i] = c.Name
		if c.Toastable {
			toast = append(toast, i)
		}
	}
	spec, err := stages.NewTableSpec(t, rules, cols, identityNames(info))
	if err != nil {
		return nil, err
	}
	spec.Toast = toast
	return spec, nil
}

// tables lists the rules' tables the pipeline replicates.
func (r *Replicator) tables(rules *syncrules.Rules) []string { return pipelineTables(r.pl, rules) }

// pipelineTables lists the rules' tables pipeline pl replicates: all of
// them, or those its tables setting names ("table" meaning public.table).
func pipelineTables(pl config.Pipeline, rules *syncrules.Rules) []string {
	want := map[string]bool{}
	for _, t := range pl.Tables {
		if schema, name, err := postgres.ParseTableName(t); err == nil {
			want[schema+"."+name] = true
		}
	}
	var names []string
	for _, t := range rules.Tables() {
		name := t.String()
		if schema, table, err := postgres.ParseTableName(name); err == nil && (len(want) == 0 || want[schema+"."+table]) {
			names = append(names, name)
		}
	}
	return names
}
