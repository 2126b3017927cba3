package replication

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"

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

// SinkOptions configures a SinkRunner.
type SinkOptions struct {
	Config *config.Config
	// Pipeline is the resolved pipeline (config.EffectivePipelines) to run.
	Pipeline config.Pipeline
	// Sink is the pipeline's opened sink; the caller closes it after Run.
	Sink sinks.Sink
	// Store keeps the pipeline's version, slot, snapshot plan and errors:
	// a *bucketstore.Catalog, or StateFiles for a config without storage.
	Store  SinkStorage
	Logger *slog.Logger
	Tracer pipeline.StageTracer
	// Role is as in Options: "replication:snapshot" never streams.
	Role string
}

// SinkRunner runs one pipeline whose sink is not bucket storage: its own
// slot (named after the pipeline), a parallel snapshot of its tables in key
// ranges, then the stream, through the exported stages and the chain
// bucket storage runs through too (stages.Chain):
//
//	snapshot: read → eval → build → flush (flush_writers) → commit
//	stream:   read → decode (decode_workers) → eval → build → flush → commit
//
// (a sink that is a sinks.OrderedStream gets one stream writer, and its
// Preparer's probe stage before it).
//
// The sink keeps the snapshot and stream progress (sinks.Sink.Resume);
// SinkOptions.Store (storage, or a state file) keeps the pipeline's
// version: a changed sink, table list or sync rules is a new version,
// which resets the sink and snapshots afresh.
type SinkRunner struct {
	o     SinkOptions
	pl    config.Pipeline
	log   *slog.Logger
	state bucketstore.SinkPipeline
	rules *syncrules.Rules

	// renew makes the next attempt start a new version: the slot lost
	// changes, or no longer delivers a transaction the sink holds part of.
	renew bool

	mu     sync.Mutex
	tables map[string]*sinkTable // by schema.name
}

// sinkTable is one replicated table of a sink pipeline.
type sinkTable struct {
	info postgres.TableInfo
	t    model.Table
	spec *stages.TableSpec
}

// NewSinkRunner returns a runner for o.Pipeline; Run starts it.
func NewSinkRunner(o SinkOptions) *SinkRunner {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o.Tracer = withStageMetrics(o.Tracer, otel.GetMeterProvider(), o.Pipeline.Name) // stage and row metrics (metrics.go)
	return &SinkRunner{o: o, pl: o.Pipeline, log: log.With("pipeline", o.Pipeline.Name), tables: map[string]*sinkTable{}}
}

// Run replicates until ctx ends (it then returns nil). Failures are
// retried with backoff; one that needs an operator is stored for status.
func (r *SinkRunner) Run(ctx context.Context) error {
	backoff := minBackoff
	for {
		start := time.Now()
		err := r.run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			return nil
		}
		// A stream that finds no publication although run's preflight saw
		// (or made) it has a slot that started before the publication
		// existed (another pipeline created it later): that slot can never
		// decode past the gap, so a new version starts.
		renew := slotGone(err) || errors.Is(err, postgres.ErrTxnNotRedelivered) || errors.Is(err, logrepl.ErrPublicationMissing)
		if renew {
			r.renew = true
		}
		if time.Since(start) > time.Minute {
			backoff = minBackoff // it worked for a while: a new failure
		}
		delay := jitter(backoff)
		if !renew && (fatal(err) || backoff >= maxBackoff) {
			delay = jitter(fatalRetry)
			r.report(ctx, err)
		}
		r.log.Warn("pipeline failed; retrying", "err", err, "retry_in", delay.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (r *SinkRunner) report(ctx context.Context, err error) {
	if r.state.Name == "" {
		return // nothing stored yet to attach it to
	}
	if serr := r.o.Store.ReportSinkPipelineError(ctx, r.pl.Name, err.Error()); serr != nil {
		r.log.Warn("could not store the pipeline error", "err", serr)
	}
}

// run is one attempt: version, tables, snapshot, stream.
func (r *SinkRunner) run(ctx context.Context) error {
	rulesText, err := r.o.Config.SyncRules.Read()
	if err != nil {
		return err
	}
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	// The publication must exist before a new version's slot does: the
	// slot decodes with the catalog as of each change, and a publication
	// created after the slot's start is missing for the changes before it,
	// which fails the stream for good.
	if err := r.preflight(ctx, conn, rulesText); err != nil {
		return err
	}
	if err := r.ensureVersion(ctx, string(rulesText)); err != nil {
		return err
	}
	rules, err := syncrules.Parse(rulesText, syncrules.Options{File: "sync rules", GroupID: strconv.Itoa(r.state.Version)})
	if err != nil {
		return err
	}
	r.rules = rules
	if err := r.loadTables(ctx, conn); err != nil {
		return err
	}
	if !r.state.SnapshotDone {
		if err := r.snapshot(ctx, conn); err != nil {
			return err
		}
	}
	if r.o.Role == "replication:snapshot" {
		<-ctx.Done()
		return nil
	}
	return r.stream(ctx)
}

func (r *SinkRunner) connect(ctx context.Context) (*pgx.Conn, error) {
	return postgres.Connect(ctx, r.pl.Source.URI, r.o.Config.Source.ConnectTimeout)
}

// fingerprint identifies what a version replicates: the sync rules, the
// tables and the sink with its settings. The source URI is left out, so
// that a new password does not re-snapshot.
func (r *SinkRunner) fingerprint(rules string) string {
	tables := slices.Clone(r.pl.Tables)
	slices.Sort(tables)
	b, _ := json.Marshal(struct {
		Rules    string
		Tables   []string
		Sink     string
		Settings map[string]any
	}{rules, tables, r.pl.Sink.Type, r.pl.Sink.Settings})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ensureVersion loads the pipeline's stored version, or starts a new one
// when what it replicates changed or its slot is gone: the old slot is
// dropped, the sink reset, a new slot created — before any snapshot read,
// so the stream later replays every change the snapshot may miss — and
// only then the version stored. A crash half-way repeats the lot.
func (r *SinkRunner) ensureVersion(ctx context.Context, rules string) error {
	st, ok, err := r.o.Store.SinkPipeline(ctx, r.pl.Name)
	if err != nil {
		return err
	}
	fp := r.fingerprint(rules)
	repl, err := logrepl.Connect(ctx, replicationURI(r.pl.Source.URI, r.o.Config.Source.ConnectTimeout, false))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := closeCtx()
		repl.Close(cctx)
		cancel()
	}()
	if ok && st.Fingerprint == fp && r.renew {
		r.log.Warn("the pipeline's slot cannot continue its stream: starting a new version, which snapshots afresh", "slot", st.SlotName)
	} else if ok && st.Fingerprint == fp {
		wctx, cancel := context.WithTimeout(ctx, slotCreateWait)
		slot, err := logrepl.AwaitSlot(wctx, repl, st.SlotName)
		cancel()
		if err == nil && slot.WALStatus != "lost" {
			r.state = st
			return nil
		}
		if err != nil && !errors.Is(err, logrepl.ErrSlotMissing) {
			return err
		}
		r.log.Warn("the pipeline's replication slot is gone or lost: starting a new version, which snapshots afresh", "slot", st.SlotName)
	} else if ok {
		r.log.Info("the pipeline's sync rules, tables or sink changed: starting a new version, which snapshots afresh", "version", st.Version+1)
	}
	next := bucketstore.SinkPipeline{Name: r.pl.Name, Version: st.Version + 1, Fingerprint: fp, SinkType: r.pl.Sink.Type,
		Tables: slices.Clone(r.pl.Tables), SlotName: sinkSlotName(r.pl.Source.SlotPrefix, r.pl.Name)}
	if next.Tables == nil {
		next.Tables = []string{}
	}
	if ok {
		if err := logrepl.DropSlot(ctx, repl, st.SlotName); err != nil && !errors.Is(err, logrepl.ErrSlotMissing) {
			return err
		}
	}
	if err := r.resetSink(ctx, ok); err != nil {
		return err
	}
	if err := logrepl.DropSlot(ctx, repl, next.SlotName); err != nil && !errors.Is(err, logrepl.ErrSlotMissing) {
		return err // left by a start that crashed before storing its version
	}
	if _, err := logrepl.CreateSlot(ctx, repl, next.SlotName); err != nil {
		return err
	}
	if err := r.o.Store.StartSinkPipelineVersion(ctx, next); err != nil {
		return err
	}
	r.log.Info("started pipeline version", "version", next.Version, "slot", next.SlotName)
	r.state, r.renew = next, false
	return nil
}

// resetSink makes the sink forget an earlier version's data and progress.
// A sink that cannot reset is refused when it holds progress: it would mix
// two versions.
func (r *SinkRunner) resetSink(ctx context.Context, hadVersion bool) error {
	if rs, ok := r.o.Sink.(sinks.Resetter); ok {
		return rs.Reset(ctx)
	}
	if _, held, err := r.o.Sink.Resume(ctx, "", 0); err != nil {
		return err
	} else if held || hadVersion {
		return fmt.Errorf("pipeline %s needs a fresh snapshot, but its sink (%s) holds progress of an earlier version and cannot be reset: clear the sink's data and progress, then restart",
			r.pl.Name, r.pl.Sink.Type)
	}
	return nil
}

// sinkSlotName names a pipeline's slot: the slot prefix, "p" (apart from
// bucket storage groups' slots) and the pipeline name folded to what slot
// names allow.
func sinkSlotName(prefix, name string) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(prefix, "_") + "_p_")
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		sum := sha256.Sum256([]byte(name))
		s = s[:54] + "_" + hex.EncodeToString(sum[:4])
	}
	return s
}

// preflight checks the source for the pipeline's tables and creates the
// publication if it is missing.
func (r *SinkRunner) preflight(ctx context.Context, conn *pgx.Conn, rulesText []byte) error {
	rules, err := syncrules.Parse(rulesText, syncrules.Options{File: "sync rules", GroupID: "0"})
	if err != nil {
		return err
	}
	names := pipelineTables(r.pl, rules)
	return postgres.Preflight(ctx, conn, postgres.PreflightOptions{Publication: r.pl.Source.Publication, Tables: names, CreatePublication: true})
}

// CreatePublications creates, before any pipeline starts, each missing
// publication its source's pipelines use, for the union of their tables:
// a pipeline that created it for its own tables alone would leave the
// others' tables out (and a slot created before it would miss it). It is
// best effort: problems are left to each pipeline's own preflight, which
// reports them.
func CreatePublications(ctx context.Context, cfg *config.Config, log *slog.Logger) {
	rulesText, err := cfg.SyncRules.Read()
	if err != nil {
		return
	}
	rules, err := syncrules.Parse(rulesText, syncrules.Options{File: "sync rules", GroupID: "0"})
	if err != nil {
		return
	}
	type pub struct{ uri, name string }
	tables := map[pub][]string{}
	for _, pl := range cfg.EffectivePipelines() {
		k := pub{pl.Source.URI, pl.Source.Publication}
		for _, t := range pipelineTables(pl, rules) {
			if !slices.Contains(tables[k], t) {
				tables[k] = append(tables[k], t)
			}
		}
	}
	for k, names := range tables {
		conn, err := postgres.Connect(ctx, k.uri, cfg.Source.ConnectTimeout)
		if err != nil {
			continue
		}
		err = postgres.Preflight(ctx, conn, postgres.PreflightOptions{Publication: k.name, Tables: names, CreatePublication: true})
		closeConn(conn)
		if err != nil {
			log.Debug("publication preflight before the pipelines start", "publication", k.name, "err", err)
		}
	}
}

// loadTables binds the rules to the pipeline's tables (checked by
// preflight).
func (r *SinkRunner) loadTables(ctx context.Context, conn *pgx.Conn) error {
	infos, err := discover(ctx, conn, pipelineTables(r.pl, r.rules), r.rules)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tables = map[string]*sinkTable{}
	for _, info := range infos {
		st := &sinkTable{info: info, t: model.Table{ID: info.Schema + "." + info.Name, GroupID: r.state.Version, Schema: info.Schema, Name: info.Name}}
		if st.spec, err = tableSpec(&st.t, r.rules, info); err != nil {
			return err
		}
		r.tables[st.t.ID] = st
	}
	return nil
}
