package replication

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// The replicator's own metrics (README, "Metrics"); the autoscaling and
// slot gauges are read from storage and the source by the metrics endpoint
// (cli), not kept here. Everything is counted per batch or per unit, never
// per row:
//
//   - syncpipe_rows_replicated_total{pipeline,phase}: source rows whose
//     batch was committed, phase snapshot or stream (the commit stage's
//     input rows, from the stage tracer).
//   - syncpipe_stage_busy_seconds_total, syncpipe_stage_rows_total,
//     syncpipe_stage_blocked_seconds_total{pipeline,phase,stage}: the
//     framework's own per-batch timing (pipeline.StageEndInfo.Duration,
//     BlockedInfo), which the stage-time summary adds up too: nothing is
//     timed twice.
//   - syncpipe_replication_lag_seconds{group}: for each group whose stream
//     runs in this process, how long the oldest source transaction it
//     received but has not yet published in a checkpoint has been
//     committed on the source (0 when everything received is in a
//     checkpoint): how stale what clients can see may be.
//   - syncpipe_lease_acquisitions_total and syncpipe_lease_takeovers_total
//     {unit}: leases taken, and those taken from a holder that had not
//     released them (expired, or its process died).
//   - syncpipe_replication_failing_units{group,unit,kind}: the group's
//     units of that kind whose last attempt failed (fatal or retryable),
//     until the group makes progress again (as its stored error).
type replMetrics struct {
	leases, takeovers metric.Int64Counter
	meter             metric.Meter

	mu      sync.Mutex
	lags    map[int]*lagTracker   // group → its stream here, while it runs
	failing map[string]unitFailed // unit name → its last failure
}

// unitFailed is a unit whose last attempt failed.
type unitFailed struct {
	group      int
	unit, kind string // unit kind (stream, snapshot, retire); fatal or retryable
	progress   uint64 // the group's progress count when it failed
}

const meterName = "github.com/syncpipe/syncpipe/replication"

func newReplMetrics(mp metric.MeterProvider) *replMetrics {
	m := mp.Meter(meterName)
	leases, _ := m.Int64Counter("syncpipe_lease_acquisitions_total",
		metric.WithDescription("Work unit leases this process acquired, by unit kind."))
	takeovers, _ := m.Int64Counter("syncpipe_lease_takeovers_total",
		metric.WithDescription("Work unit leases this process took over from a holder that had not released them (expired, or its process died), by unit kind."))
	return &replMetrics{leases: leases, takeovers: takeovers, meter: m,
		lags: map[int]*lagTracker{}, failing: map[string]unitFailed{}}
}

// leaseAcquired counts the acquisition of lease l.
func (m *replMetrics) leaseAcquired(ctx context.Context, name string, takeover bool) {
	kind, _, _ := strings.Cut(name, "/") // stream/3, snapshot/<table>/<range>
	opt := metric.WithAttributes(attribute.String("unit", kind))
	m.leases.Add(ctx, 1, opt)
	if takeover {
		m.takeovers.Add(ctx, 1, opt)
	}
}

// observe registers the gauges kept in this process (lag, failing units)
// until the returned function is called.
func (m *replMetrics) observe(errs *errorState) func() {
	lag, err1 := m.meter.Float64ObservableGauge("syncpipe_replication_lag_seconds", metric.WithUnit("s"),
		metric.WithDescription("Per group streaming here: age of the oldest source transaction received but not yet in a checkpoint (source commit time to now; 0 when caught up)."))
	failing, err2 := m.meter.Int64ObservableGauge("syncpipe_replication_failing_units",
		metric.WithDescription("Work units whose last attempt failed, by group, unit kind and error kind (fatal: needs an operator), until the group makes progress."))
	if err1 != nil || err2 != nil {
		return func() {}
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		type key struct {
			group      int
			unit, kind string
		}
		counts := map[key]int64{}
		m.mu.Lock()
		for g, l := range m.lags {
			o.ObserveFloat64(lag, l.lag(now).Seconds(), metric.WithAttributes(attribute.String("group", strconv.Itoa(g))))
		}
		fs := make([]unitFailed, 0, len(m.failing))
		for _, f := range m.failing {
			fs = append(fs, f)
		}
		m.mu.Unlock()
		for _, f := range fs {
			if errs.progressOf(f.group) == f.progress {
				counts[key{f.group, f.unit, f.kind}]++
			}
		}
		for k, n := range counts {
			o.ObserveInt64(failing, n, metric.WithAttributes(attribute.String("group", strconv.Itoa(k.group)),
				attribute.String("unit", k.unit), attribute.String("kind", k.kind)))
		}
		return nil
	}, lag, failing)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// unitFailedNow records that unit's attempt failed (see retry).
func (m *replMetrics) unitFailedNow(group int, unit, kind string, isFatal bool, progress uint64) {
	ek := "retryable"
	if isFatal {
		ek = "fatal"
	}
	m.mu.Lock()
	m.failing[unit] = unitFailed{group: group, unit: kind, kind: ek, progress: progress}
	m.mu.Unlock()
}

// unitEnded forgets unit's failure: it succeeded or stopped.
func (m *replMetrics) unitEnded(unit string) {
	m.mu.Lock()
	delete(m.failing, unit)
	m.mu.Unlock()
}

// streaming returns the lag tracker of group's stream, observed until its
// stop is called.
func (m *replMetrics) streaming(group int) *lagTracker {
	l := &lagTracker{m: m, group: group}
	m.mu.Lock()
	m.lags[group] = l
	m.mu.Unlock()
	return l
}

// streamLags returns the lag of every stream running here, by group.
func (m *replMetrics) streamLags(now time.Time) map[int]time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]time.Duration, len(m.lags))
	for g, l := range m.lags {
		out[g] = l.lag(now)
	}
	return out
}

// lagTracker follows the source transactions of one stream between the
// read stage (received) and the commit stage (in a checkpoint): one entry
// per logical replication batch, not per transaction.
type lagTracker struct {
	m     *replMetrics
	group int

	mu      sync.Mutex
	pending []pendingTxns // received, not yet in a checkpoint, in stream order
}

// pendingTxns are the transactions of one received batch: applied once a
// checkpoint passes last, committed on the source at first at the
// earliest.
type pendingTxns struct {
	last  logrepl.LSN // commit LSN of the batch's last transaction
	first time.Time   // source commit time of its first new transaction
}

// received notes the transactions of a logical replication batch (the
// read stage, once per batch). Pieces of a transaction already noted add
// nothing.
func (l *lagTracker) received(txns []logrepl.Txn) {
	if l == nil {
		return
	}
	for i := range txns {
		if txns[i].Continued {
			continue
		}
		p := pendingTxns{last: txns[len(txns)-1].CommitLSN, first: txns[i].CommitTime}
		l.mu.Lock()
		l.pending = append(l.pending, p)
		l.mu.Unlock()
		return
	}
}

// checkpointed notes a checkpoint at lsn (the commit stage): every
// transaction committed before it is visible.
func (l *lagTracker) checkpointed(lsn logrepl.LSN) {
	if l == nil {
		return
	}
	l.mu.Lock()
	n := 0
	for n < len(l.pending) && l.pending[n].last < lsn {
		n++
	}
	if n > 0 {
		l.pending = append(l.pending[:0], l.pending[n:]...)
	}
	l.mu.Unlock()
}

// lag is the age of the oldest pending transaction at now (0 if none).
func (l *lagTracker) lag(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		return 0
	}
	return max(0, now.Sub(l.pending[0].first))
}

// stop ends the observation: the stream no longer runs here.
func (l *lagTracker) stop() {
	l.m.mu.Lock()
	if l.m.lags[l.group] == l {
		delete(l.m.lags, l.group)
	}
	l.m.mu.Unlock()
}

// stageMetrics is a pipeline.StageTracer that exports the framework's
// per-batch stage timing and row counts (and the rows committed as
// syncpipe_rows_replicated_total) for one configured pipeline. Its label
// sets are made once per phase and stage.
type stageMetrics struct {
	pipeline                   string
	busy, blocked              metric.Float64Counter
	rows, replicated           metric.Int64Counter
	attrs                      sync.Map // stageKey → *stageAttrs
	phaseSnapshot, phaseStream []metric.AddOption
}

type stageKey struct{ phase, stage string }

type stageAttrs struct{ opts []metric.AddOption }

// withStageMetrics returns tracer (which may be nil) combined with the
// stage metrics of the configured pipeline named name.
func withStageMetrics(tracer pipeline.StageTracer, mp metric.MeterProvider, name string) pipeline.StageTracer {
	m := mp.Meter(meterName)
	busy, _ := m.Float64Counter("syncpipe_stage_busy_seconds", metric.WithUnit("s"),
		metric.WithDescription("Time spent inside each pipeline stage, summed over its workers, by pipeline, phase (snapshot, stream) and stage."))
	blocked, _ := m.Float64Counter("syncpipe_stage_blocked_seconds", metric.WithUnit("s"),
		metric.WithDescription("Time each pipeline stage waited on a full downstream channel (backpressure), by pipeline, phase and stage."))
	rows, _ := m.Int64Counter("syncpipe_stage_rows",
		metric.WithDescription("Source rows through each pipeline stage (produced, for the read stage), by pipeline, phase and stage."))
	replicated, _ := m.Int64Counter("syncpipe_rows_replicated",
		metric.WithDescription("Source rows applied (their batch committed), by pipeline and phase (snapshot, stream)."))
	s := &stageMetrics{pipeline: name, busy: busy, blocked: blocked, rows: rows, replicated: replicated}
	phaseOpts := func(phase string) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("pipeline", name), attribute.String("phase", phase)))}
	}
	s.phaseSnapshot, s.phaseStream = phaseOpts("snapshot"), phaseOpts("stream")
	if tracer == nil {
		return s
	}
	return pipeline.MultiTracer{tracer, s}
}

// phase tells snapshot pipelines ("snapshot …") from streams ("stream …").
func phase(pipelineName string) string {
	switch {
	case strings.HasPrefix(pipelineName, "snapshot"):
		return "snapshot"
	case strings.HasPrefix(pipelineName, "stream"):
		return "stream"
	}
	return "other"
}

func (s *stageMetrics) opts(info pipeline.StageInfo) []metric.AddOption {
	k := stageKey{phase(info.Pipeline), info.Stage}
	if a, ok := s.attrs.Load(k); ok {
		return a.(*stageAttrs).opts
	}
	a := &stageAttrs{opts: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String("pipeline", s.pipeline), attribute.String("phase", k.phase), attribute.String("stage", k.stage)))}}
	v, _ := s.attrs.LoadOrStore(k, a)
	return v.(*stageAttrs).opts
}

// StageStart implements pipeline.StageTracer; the accounting is in StageEnd.
func (s *stageMetrics) StageStart(ctx context.Context, _ pipeline.StageInfo) context.Context {
	return ctx
}

// StageEnd implements pipeline.StageTracer: one batch of one stage.
func (s *stageMetrics) StageEnd(ctx context.Context, info pipeline.StageEndInfo) {
	opts := s.opts(info.StageInfo)
	s.busy.Add(ctx, info.Duration.Seconds(), opts...)
	if info.Err != nil {
		return // a failed batch, or the source's final empty read
	}
	rows := info.Rows
	if info.Kind == pipeline.KindSource {
		rows = info.OutRows
	}
	if rows <= 0 {
		return
	}
	s.rows.Add(ctx, int64(rows), opts...)
	if info.Kind == pipeline.KindCommit {
		switch phase(info.Pipeline) {
		case "snapshot":
			s.replicated.Add(ctx, int64(rows), s.phaseSnapshot...)
		case "stream":
			s.replicated.Add(ctx, int64(rows), s.phaseStream...)
		}
	}
}

// StageBlocked implements pipeline.BackpressureTracer.
func (s *stageMetrics) StageBlocked(ctx context.Context, info pipeline.BlockedInfo) {
	s.blocked.Add(ctx, info.Blocked.Seconds(), s.opts(info.StageInfo)...)
}
