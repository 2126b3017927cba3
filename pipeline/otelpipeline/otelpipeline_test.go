package otelpipeline_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/pipeline/otelpipeline"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestOneTracePerBatch: every stage of a batch with rows has one span,
// named pipeline/stage, and a batch's spans share one trace whose root is
// its source's span; batches without rows (an idle stream's, the end of
// input) make no span at all.
func TestOneTracePerBatch(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	tr := otelpipeline.New(otelpipeline.Config{TracerProvider: tp})
	p := pipeline.New[int](pipeline.Config{Name: "snapshot", Labels: []pipeline.Label{{Key: "table", Value: "todos"}}, Tracer: tr})
	n := 0
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[int, int](
		func(context.Context) (pipeline.Batch[int, int], error) {
			if n == 6 {
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			}
			n++
			if n%2 == 0 { // an idle batch: progress, no rows
				return pipeline.Batch[int, int]{Progress: n}, nil
			}
			return pipeline.Batch[int, int]{Rows: 100, Bytes: 4096, Progress: n, Items: make([]int, 100)}, nil
		}))
	ev := pipeline.Process(src, pipeline.StageConfig{Name: "eval", Workers: 2, Ordered: true},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
			return pipeline.Batch[int, int]{Rows: b.Rows, Bytes: b.Bytes, Items: b.Items}, nil // built by hand: the trace is kept
		})
	pipeline.Commit(ev, pipeline.StageConfig{Name: "commit"}, func(context.Context, pipeline.Batch[int, int]) error { return nil })
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	count := map[string]int{}
	traces := map[trace.TraceID]map[string]sdktrace.ReadOnlySpan{} // trace → stage → span
	for _, s := range rec.Ended() {
		count[s.Name()]++
		a := attrs(s)
		if a["pipeline"].AsString() != "snapshot" || a["table"].AsString() != "todos" {
			t.Fatalf("span %s lacks pipeline/table attributes: %v", s.Name(), a)
		}
		if a["rows"].AsInt64() != 100 || a["bytes"].AsInt64() != 4096 || a["stage"].AsString() == "" {
			t.Fatalf("span %s: rows %v bytes %v stage %v", s.Name(), a["rows"], a["bytes"], a["stage"])
		}
		if seq := a["seq"].AsInt64(); seq%2 != 0 || seq > 4 {
			t.Fatalf("span %s: seq %d, want a batch with rows (0, 2 or 4)", s.Name(), seq)
		}
		id := s.SpanContext().TraceID()
		if traces[id] == nil {
			traces[id] = map[string]sdktrace.ReadOnlySpan{}
		}
		traces[id][a["stage"].AsString()] = s
	}
	if count["snapshot/read"] != 3 || count["snapshot/eval"] != 3 || count["snapshot/commit"] != 3 || len(count) != 3 {
		t.Fatalf("span counts %v, want read, eval and commit 3 each (the 3 batches with rows)", count)
	}
	if len(traces) != 3 {
		t.Fatalf("%d traces, want 3: one per batch with rows", len(traces))
	}
	for id, stages := range traces {
		read, eval, commit := stages["read"], stages["eval"], stages["commit"]
		if read == nil || eval == nil || commit == nil {
			t.Fatalf("trace %s has stages %v, want read, eval and commit", id, stages)
		}
		if read.Parent().IsValid() {
			t.Errorf("trace %s: the read span has a parent, want it the batch's root", id)
		}
		for _, s := range []sdktrace.ReadOnlySpan{eval, commit} {
			if s.Parent().SpanID() != read.SpanContext().SpanID() {
				t.Errorf("trace %s: %s's parent is %s, want the read span %s", id, s.Name(), s.Parent().SpanID(), read.SpanContext().SpanID())
			}
		}
		a, e := attrs(read), attrs(eval)
		if a["seq"] != e["seq"] {
			t.Errorf("trace %s: read seq %v, eval seq %v", id, a["seq"], e["seq"])
		}
		if read.EndTime().After(eval.StartTime()) || read.EndTime().Before(read.StartTime()) {
			t.Errorf("trace %s: read span %s–%s, eval starts %s", id, read.StartTime(), read.EndTime(), eval.StartTime())
		}
	}
}

func TestFailedStageSpanRecordsError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := otelpipeline.New(otelpipeline.Config{TracerProvider: tp})

	boom := errors.New("storage down")
	ctx := tr.StageStart(context.Background(), pipeline.StageInfo{Pipeline: "p", Stage: "write", Kind: pipeline.KindFlush, Seq: 7})
	tr.StageEnd(ctx, pipeline.StageEndInfo{StageInfo: pipeline.StageInfo{Stage: "write", Seq: 7}, Err: boom})
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	if s := spans[0]; s.Status().Code != codes.Error || s.Status().Description != boom.Error() || len(s.Events()) == 0 {
		t.Fatalf("status %+v, %d events: error not recorded", s.Status(), len(s.Events()))
	}
	if got := attrs(spans[0])["seq"].AsInt64(); got != 7 {
		t.Fatalf("seq attribute %d, want 7", got)
	}
}
