// Package otelpipeline adapts pipeline's stage tracer hook to OpenTelemetry:
// one span per stage per batch, never per row, so tracing cost stays
// proportional to batches (thousands of rows each) and traces stay readable.
//
// Spans are named "<pipeline>/<stage>" and are children of whatever span is in
// the context passed to pipeline.Run. Attributes: pipeline, stage, kind,
// worker, seq, rows, bytes, every pipeline label under its own key (for
// example table), and rows.out and bytes.out when the stage ends. For a
// source, rows and bytes are those it produced. A failed stage records the
// error and sets the span status to Error; a source's end of input does not.
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
	AttrEOF      = attribute.Key("end_of_input")
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

// StageStart opens the span of one stage for one batch.
func (t *Tracer) StageStart(ctx context.Context, info pipeline.StageInfo) context.Context {
	attrs := make([]attribute.KeyValue, 0, 7+len(info.Labels))
	attrs = append(attrs,
		AttrPipeline.String(info.Pipeline),
		AttrStage.String(info.Stage),
		AttrKind.String(info.Kind.String()),
		AttrWorker.Int(info.Worker),
		AttrSeq.Int64(int64(info.Seq)),
		AttrRows.Int(info.Rows),
		AttrBytes.Int64(info.Bytes),
	)
	for _, l := range info.Labels {
		attrs = append(attrs, attribute.String(l.Key, l.Value))
	}
	name := info.Stage
	if info.Pipeline != "" {
		name = info.Pipeline + "/" + info.Stage
	}
	ctx, _ = t.tracer.Start(ctx, name, trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
	return ctx
}

// StageEnd closes the span opened by StageStart.
func (t *Tracer) StageEnd(ctx context.Context, info pipeline.StageEndInfo) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(AttrRowsOut.Int(info.OutRows), AttrBytesOut.Int64(info.OutBytes))
	if info.Kind == pipeline.KindSource {
		span.SetAttributes(AttrRows.Int(info.OutRows), AttrBytes.Int64(info.OutBytes))
	}
	switch {
	case errors.Is(info.Err, pipeline.ErrEndOfInput):
		span.SetAttributes(AttrEOF.Bool(true))
	case info.Err != nil:
		span.RecordError(info.Err)
		span.SetStatus(codes.Error, info.Err.Error())
	}
	span.End()
}
