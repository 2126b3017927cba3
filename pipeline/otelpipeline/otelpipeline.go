// Package otelpipeline adapts pipeline's stage tracer hook to OpenTelemetry:
// one span per stage per batch with rows, never per row, so tracing cost
// stays proportional to batches (thousands of rows each) and traces stay
// readable.
//
// Spans are named "<pipeline>/<stage>". A batch's spans form one trace: its
// source stage's span is the root (a child of whatever span is in the
// context passed to pipeline.Run), and every later stage's span is its
// child, so a sampling decision is taken once per batch. A batch without
// rows — an idle stream's, a source's end of input — makes no span.
// Attributes: pipeline, stage, kind, worker, seq, rows, bytes, every
// pipeline label under its own key (for example table), and rows.out and
// bytes.out when the stage ends. For a source, rows and bytes are those it
// produced. A failed stage records the error and sets the span status to
// Error (a source's end of input is not an error).
package otelpipeline

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncpipe/syncpipe/pipeline"
)

// ScopeName is the instrumentation scope of the spans, so they can be
// filtered or sampled as a group.
const ScopeName = "github.com/syncpipe/syncpipe/pipeline/otelpipeline"

// Attribute keys set on every stage span.
const (
	AttrPipeline = attribute.Key("pipeline")
	AttrStage    = attribute.Key("stage")
	AttrKind     = attribute.Key("kind")
	AttrWorker   = attribute.Key("worker")
	AttrSeq      = attribute.Key("seq")
	AttrRows     = attribute.Key("rows")
	AttrBytes    = attribute.Key("bytes")
	AttrRowsOut  = attribute.Key("rows.out")
	AttrBytesOut = attribute.Key("bytes.out")
)

// Config selects where spans go.
type Config struct {
	// TracerProvider creates the tracer; nil uses the global provider, so an
	// application that configured otel globally needs no wiring.
	TracerProvider trace.TracerProvider
}

// Tracer implements pipeline.StageTracer with OpenTelemetry spans.
type Tracer struct {
	tracer trace.Tracer
}

// New returns a Tracer for cfg.
func New(cfg Config) *Tracer {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(ScopeName)}
}

// batchSpan is the span context of a batch's source span, which the
// source's StageEnd creates once it knows the batch has rows. The context
// StageStart returns for a source carries it; the framework hands that
// context to the batch's later stages (StageInfo.Batch), after a channel
// send, so its write happens before their reads.
type batchSpan struct{ sc trace.SpanContext }

type batchSpanKey struct{}

// StageStart opens the span of one stage for one batch: a child of the
// batch's source span, so that a batch's stages share one trace. A source
// span is created only at StageEnd (a batch without rows, e.g. an idle
// stream's, makes no span), and so is a span of a batch without rows
// that fails.
func (t *Tracer) StageStart(ctx context.Context, info pipeline.StageInfo) context.Context {
	if info.Kind == pipeline.KindSource {
		return context.WithValue(ctx, batchSpanKey{}, &batchSpan{})
	}
	if info.Rows == 0 {
		return ctx
	}
	ctx, _ = t.tracer.Start(batchParent(ctx, info.Batch), spanName(info), trace.WithAttributes(attrs(info)...),
		trace.WithSpanKind(trace.SpanKindInternal))
	return ctx
}

// StageEnd closes the span opened by StageStart, or for a source (and a
// failed batch without rows) creates it with the stage's start and
// duration.
func (t *Tracer) StageEnd(ctx context.Context, info pipeline.StageEndInfo) {
	var span trace.Span
	switch {
	case info.Kind != pipeline.KindSource && info.Rows > 0:
		span = trace.SpanFromContext(ctx)
	case info.Kind == pipeline.KindSource && info.OutRows > 0, failed(info.Err):
		var parent context.Context = ctx
		if info.Kind != pipeline.KindSource {
			parent = batchParent(ctx, info.Batch)
		}
		_, span = t.tracer.Start(parent, spanName(info.StageInfo), trace.WithAttributes(attrs(info.StageInfo)...),
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(info.Start))
		if b, ok := ctx.Value(batchSpanKey{}).(*batchSpan); ok && info.Kind == pipeline.KindSource {
			b.sc = span.SpanContext()
		}
	default:
		return // no rows: no span
	}
	span.SetAttributes(AttrRowsOut.Int(info.OutRows), AttrBytesOut.Int64(info.OutBytes))
	if info.Kind == pipeline.KindSource {
		span.SetAttributes(AttrRows.Int(info.OutRows), AttrBytes.Int64(info.OutBytes))
	}
	if info.Err != nil {
		span.RecordError(info.Err)
		span.SetStatus(codes.Error, info.Err.Error())
	}
	span.End(trace.WithTimestamp(info.Start.Add(info.Duration)))
}

// failed reports whether a stage failed: an error other than a source's
// end of input or the run's cancellation (a stop), which make no span for
// a batch without rows.
func failed(err error) bool {
	return err != nil && !errors.Is(err, pipeline.ErrEndOfInput) && !errors.Is(err, context.Canceled)
}

// batchParent makes the batch's source span (carried by batch, the
// context StageStart returned for the batch's source) the parent in ctx.
func batchParent(ctx, batch context.Context) context.Context {
	if batch == nil {
		return ctx
	}
	if b, ok := batch.Value(batchSpanKey{}).(*batchSpan); ok && b.sc.IsValid() {
		return trace.ContextWithSpanContext(ctx, b.sc)
	}
	return ctx
}

// spanName is "<pipeline>/<stage>", or the stage's name alone.
func spanName(info pipeline.StageInfo) string {
	if info.Pipeline == "" {
		return info.Stage
	}
	return info.Pipeline + "/" + info.Stage
}

// attrs are the attributes a stage's span starts with.
func attrs(info pipeline.StageInfo) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 7+len(info.Labels))
	a = append(a,
		AttrPipeline.String(info.Pipeline),
		AttrStage.String(info.Stage),
		AttrKind.String(info.Kind.String()),
		AttrWorker.Int(info.Worker),
		AttrSeq.Int64(int64(info.Seq)),
		AttrRows.Int(info.Rows),
		AttrBytes.Int64(info.Bytes),
	)
	for _, l := range info.Labels {
		a = append(a, attribute.String(l.Key, l.Value))
	}
	return a
}
