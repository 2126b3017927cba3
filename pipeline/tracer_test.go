package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

type ctxKey string

// recordingTracer logs events and checks that StageEnd gets the context its
// StageStart returned.
type recordingTracer struct {
	name string
	mu   *sync.Mutex
	log  *[]string
	errs []string
	ends []pipeline.StageEndInfo
}

func (r *recordingTracer) StageStart(ctx context.Context, info pipeline.StageInfo) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if info.Stage == "eval" {
		*r.log = append(*r.log, "start "+r.name)
	}
	return context.WithValue(ctx, ctxKey(r.name), info.Seq)
}

func (r *recordingTracer) StageEnd(ctx context.Context, info pipeline.StageEndInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq, ok := ctx.Value(ctxKey(r.name)).(uint64); !ok || seq != info.Seq {
		r.errs = append(r.errs, fmt.Sprintf("%s seq %d: StageEnd without StageStart's context", info.Stage, info.Seq))
	}
	if info.Stage == "eval" {
		*r.log = append(*r.log, "end "+r.name)
	}
	r.ends = append(r.ends, info)
}

func TestTracerSeesEveryStageWithContext(t *testing.T) {
	var mu sync.Mutex
	var log []string
	a := &recordingTracer{name: "a", mu: &mu, log: &log}
	b := &recordingTracer{name: "b", mu: &mu, log: &log}
	labels := []pipeline.Label{{Key: "table", Value: "todos"}}
	p := pipeline.New[int](pipeline.Config{Name: "traced", Labels: labels, Tracer: pipeline.MultiTracer{a, b}})
	var stageSawSpan bool
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(3))
	ev := pipeline.Process(src, pipeline.StageConfig{Name: "eval"},
		func(ctx context.Context, bt pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
			_, okA := ctx.Value(ctxKey("a")).(uint64)
			_, okB := ctx.Value(ctxKey("b")).(uint64)
			stageSawSpan = okA && okB
			return pipeline.Derive(bt, append(bt.Items, 0)), nil
		})
	pipeline.Commit(ev, pipeline.StageConfig{Name: "commit"}, (&committer{}).commit)
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(a.errs)+len(b.errs) > 0 {
		t.Fatal(a.errs, b.errs)
	}
	if !stageSawSpan {
		t.Fatal("stage function did not receive the tracers' context")
	}
	if got := strings.Join(log[:4], ","); got != "start a,start b,end b,end a" {
		t.Fatalf("MultiTracer order %q, want starts in order and ends reversed", got)
	}
	// 4 source calls (3 batches + end of input) + 3 eval + 3 commit.
	if len(a.ends) != 10 {
		t.Fatalf("%d StageEnd events, want 10", len(a.ends))
	}
	for _, e := range a.ends {
		if e.Pipeline != "traced" || !slices.Equal(e.Labels, labels) || e.Duration < 0 || e.Start.IsZero() {
			t.Fatalf("bad end info %+v", e)
		}
		switch e.Stage {
		case "read":
			if e.Kind != pipeline.KindSource || (e.Err == nil && e.OutRows != 1) {
				t.Fatalf("source info %+v", e)
			}
		case "eval":
			if e.Kind != pipeline.KindProcess || e.Rows != 1 || e.OutRows != 1 {
				t.Fatalf("eval info %+v", e)
			}
		case "commit":
			if e.Kind != pipeline.KindCommit || e.Rows != 1 {
				t.Fatalf("commit info %+v", e)
			}
		}
	}
}

// blockSignal closes a channel on the first backpressure event.
type blockSignal struct {
	once sync.Once
	ch   chan struct{}
}

func (b *blockSignal) StageStart(ctx context.Context, _ pipeline.StageInfo) context.Context {
	return ctx
}
func (b *blockSignal) StageEnd(context.Context, pipeline.StageEndInfo) {}
func (b *blockSignal) StageBlocked(context.Context, pipeline.BlockedInfo) {
	b.once.Do(func() { close(b.ch) })
}

// TestSummaryReportsBusyAndBlocked: a commit that holds the first batch until
// the source has blocked on the full channel shows up as blocked time on the
// source, and every batch is counted once per stage.
func TestSummaryReportsBusyAndBlocked(t *testing.T) {
	sum := pipeline.NewSummary()
	sig := &blockSignal{ch: make(chan struct{})}
	p := pipeline.New[int](pipeline.Config{Name: "sum", Depth: 1, Tracer: pipeline.MultiTracer{sum, sig}})
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(50))
	ev := pipeline.Process(src, pipeline.StageConfig{Name: "eval", Workers: 2}, jitter)
	pipeline.Commit(ev, pipeline.StageConfig{Name: "commit"}, func(ctx context.Context, b pipeline.Batch[int, int]) error {
		if b.Seq == 0 {
			select {
			case <-sig.ch:
			case <-ctx.Done():
			}
		}
		return nil
	})
	if err := wait(t, runAsync(context.Background(), p), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	stages := sum.Stages()
	if len(stages) != 3 || stages[0].Stage != "read" || stages[1].Stage != "eval" || stages[2].Stage != "commit" {
		t.Fatalf("stages %+v, want read, eval, commit in pipeline order", stages)
	}
	var blocked time.Duration
	for _, st := range stages {
		if st.Batches != 50 || st.Rows != 50 || st.Bytes != 400 || st.Errors != 0 {
			t.Fatalf("stage %s: %+v, want 50 batches of 1 row / 8 bytes", st.Stage, st)
		}
		blocked += st.Blocked
	}
	if blocked <= 0 {
		t.Fatal("no backpressure recorded although the commit held the pipeline")
	}
	if stages[1].Workers != 2 {
		t.Fatalf("eval workers %d, want 2", stages[1].Workers)
	}
	if sum.Wall() <= 0 || sum.Wall() < stages[2].Busy {
		t.Fatalf("wall %v vs commit busy %v", sum.Wall(), stages[2].Busy)
	}
	var sb strings.Builder
	if err := sum.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"STAGE", "BLOCKED", "read", "eval", "commit", "wall", "50 rows"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, sb.String())
		}
	}
	if line := sum.String(); !strings.HasPrefix(line, "wall ") || !strings.Contains(line, "| eval ") {
		t.Fatalf("one-line summary %q", line)
	}
}

// TestSummaryArithmetic feeds synthetic events to check the table's numbers.
func TestSummaryArithmetic(t *testing.T) {
	sum := pipeline.NewSummary()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	end := func(stage string, kind pipeline.StageKind, worker int, start, d time.Duration, rows int) {
		info := pipeline.StageInfo{Stage: stage, Kind: kind, Worker: worker, Rows: rows}
		if kind == pipeline.KindSource {
			info.Rows = 0
		}
		sum.StageEnd(ctx, pipeline.StageEndInfo{StageInfo: info, OutRows: rows, Start: t0.Add(start), Duration: d})
	}
	end("read", pipeline.KindSource, 0, 0, 100*time.Millisecond, 10_000)
	end("write", pipeline.KindFlush, 0, 100*time.Millisecond, 600*time.Millisecond, 10_000)
	end("write", pipeline.KindFlush, 1, 200*time.Millisecond, 800*time.Millisecond, 10_000)
	sum.StageEnd(ctx, pipeline.StageEndInfo{StageInfo: pipeline.StageInfo{Stage: "read", Kind: pipeline.KindSource},
		Start: t0.Add(time.Second), Duration: 0, Err: pipeline.ErrEndOfInput})
	st := sum.Stages()
	if st[0].Batches != 1 || st[0].Rows != 10_000 {
		t.Fatalf("source %+v: end of input must not count as a batch", st[0])
	}
	if st[1].Busy != 1400*time.Millisecond || st[1].Workers != 2 || st[1].Rows != 20_000 {
		t.Fatalf("write %+v", st[1])
	}
	if sum.Wall() != time.Second {
		t.Fatalf("wall %v, want 1s", sum.Wall())
	}
	var sb strings.Builder
	_ = sum.WriteTable(&sb)
	// write: 1.4 s busy over 1 s wall = 140%; 20k rows / 1.4 s = 14.3k rows/s.
	if !strings.Contains(sb.String(), "140.0%") || !strings.Contains(sb.String(), "14.3k") {
		t.Fatalf("table:\n%s", sb.String())
	}
}

type panickyTracer struct{}

func (panickyTracer) StageStart(ctx context.Context, _ pipeline.StageInfo) context.Context {
	return ctx
}
func (panickyTracer) StageEnd(_ context.Context, info pipeline.StageEndInfo) {
	if info.Stage == "eval" && info.Seq == 2 {
		panic("tracer bug")
	}
}

// A broken tracer fails the stage it observed instead of crashing the
// process from a framework goroutine.
func TestPanickingTracerFailsStage(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "pt", Tracer: panickyTracer{}})
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(10))
	pipeline.Commit(pipeline.Process(src, pipeline.StageConfig{Name: "eval"}, identity[int]),
		pipeline.StageConfig{Name: "commit"}, (&committer{}).commit)
	err := p.Run(context.Background())
	var se *pipeline.StageError
	var pe *pipeline.PanicError
	if !errors.As(err, &se) || !errors.As(err, &pe) || se.Stage != "eval" || se.Seq != 2 {
		t.Fatalf("got %v, want a panic located at eval batch 2", err)
	}
}
