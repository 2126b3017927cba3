package otelpipeline_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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

// TestOneSpanPerStagePerBatch: 3 batches of 100 rows through read → eval →
// commit give 3 spans per stage (plus the source's end-of-input read), not
// one per row, each carrying the batch's identity and size.
func TestOneSpanPerStagePerBatch(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	tr := otelpipeline.New(otelpipeline.Config{TracerProvider: tp})
	p := pipeline.New[int](pipeline.Config{Name: "snapshot", Labels: []pipeline.Label{{Key: "table", Value: "todos"}}, Tracer: tr})
	n := 0
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[int, int](
		func(context.Context) (pipeline.Batch[int, int], error) {
			if n == 3 {
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			}
			n++
			return pipeline.Batch[int, int]{Rows: 100, Bytes: 4096, Progress: n, Items: make([]int, 100)}, nil
		}))
	ev := pipeline.Process(src, pipeline.StageConfig{Name: "eval"},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) { return b, nil })
	pipeline.Commit(ev, pipeline.StageConfig{Name: "commit"}, func(context.Context, pipeline.Batch[int, int]) error { return nil })
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	count := map[string]int{}
	for _, s := range rec.Ended() {
		count[s.Name()]++
		a := attrs(s)
		if a["pipeline"].AsString() != "snapshot" || a["table"].AsString() != "todos" {
			t.Fatalf("span %s lacks pipeline/table attributes: %v", s.Name(), a)
		}
		if a["end_of_input"].AsBool() {
			if s.Status().Code == codes.Error {
				t.Fatal("end of input recorded as an error")
			}
			continue
		}
		if a["rows"].AsInt64() != 100 || a["bytes"].AsInt64() != 4096 || a["stage"].AsString() == "" {
			t.Fatalf("span %s: rows %v bytes %v stage %v", s.Name(), a["rows"], a["bytes"], a["stage"])
		}
		if seq := a["seq"].AsInt64(); seq < 0 || seq > 2 {
			t.Fatalf("span %s: seq %d", s.Name(), seq)
		}
	}
	if count["snapshot/read"] != 4 || count["snapshot/eval"] != 3 || count["snapshot/commit"] != 3 {
		t.Fatalf("span counts %v, want read 4 (3 + end of input), eval 3, commit 3", count)
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
