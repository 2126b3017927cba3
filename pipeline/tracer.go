package pipeline

import (
	"context"
	"time"
)

// StageInfo describes one batch entering one stage. It is a struct, not a
// parameter list, so fields can be added without breaking tracers.
type StageInfo struct {
	Pipeline string    // Config.Name
	Labels   []Label   // Config.Labels; shared, do not modify
	Stage    string    // StageConfig.Name
	Kind     StageKind // role of the stage
	Worker   int       // index of the goroutine (or writer) handling the batch
	Seq      uint64    // batch sequence number (for a source: the one it is producing)
	Rows     int       // input rows (0 for a source)
	Bytes    int64     // input bytes (0 for a source)
	// Batch is, for the stages after the source, the context StageStart
	// returned for the batch's source stage (nil for a source, or without
	// one): the framework carries it with the batch, so that a tracer can
	// put all stages of one batch into one trace.
	Batch context.Context
}

// StageEndInfo describes one batch leaving one stage.
type StageEndInfo struct {
	StageInfo
	OutRows  int           // rows of the batch the stage produced
	OutBytes int64         // bytes of the batch the stage produced
	Start    time.Time     // when the stage started on the batch
	Duration time.Duration // time spent inside the stage's function
	Err      error         // the stage's error, if any
}

// BlockedInfo reports backpressure: how long a stage waited to hand a batch
// to the next stage because that stage's input channel was full.
type BlockedInfo struct {
	StageInfo
	Blocked time.Duration
}

// StageTracer observes every batch of every stage, in the style of pgx's
// QueryTracer: StageStart may return a derived context (for example carrying
// a span) which the framework passes to the stage function and to StageEnd.
// Both methods are called on the hot path from many goroutines; they must be
// safe for concurrent use and should be cheap.
type StageTracer interface {
	StageStart(ctx context.Context, info StageInfo) context.Context
	StageEnd(ctx context.Context, info StageEndInfo)
}

// BackpressureTracer is an optional extension of StageTracer. The framework
// reports the time a stage spent blocked on a full output channel only when
// it actually blocked, after StageEnd of that batch.
type BackpressureTracer interface {
	StageBlocked(ctx context.Context, info BlockedInfo)
}

// MultiTracer fans events out to several tracers, so a run can have both an
// OpenTelemetry adapter and a Summary. It also forwards StageBlocked to the
// members that implement BackpressureTracer.
type MultiTracer []StageTracer

// StageStart calls every tracer in order, threading the context through.
func (m MultiTracer) StageStart(ctx context.Context, info StageInfo) context.Context {
	for _, t := range m {
		ctx = t.StageStart(ctx, info)
	}
	return ctx
}

// StageEnd calls every tracer in reverse order, so nested spans close
// innermost first.
func (m MultiTracer) StageEnd(ctx context.Context, info StageEndInfo) {
	for i := len(m) - 1; i >= 0; i-- {
		m[i].StageEnd(ctx, info)
	}
}

// StageBlocked forwards to the members that implement BackpressureTracer.
func (m MultiTracer) StageBlocked(ctx context.Context, info BlockedInfo) {
	for _, t := range m {
		if b, ok := t.(BackpressureTracer); ok {
			b.StageBlocked(ctx, info)
		}
	}
}
