package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

// TestSoftStopCommitsEverythingRead: after Stop, the source is not asked for
// more than the batch it may already be reading, and every batch it returned
// is committed before Run returns nil.
func TestSoftStopCommitsEverythingRead(t *testing.T) {
	src := &endless{}
	var stopped atomic.Bool
	var callsAfterStop atomic.Int32
	counted := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
		if stopped.Load() {
			callsAfterStop.Add(1)
		}
		return src.Next(ctx)
	})
	c := &committer{}
	p := pipeline.New[int](pipeline.Config{Name: "soft", Depth: 4})
	s := pipeline.From(p, pipeline.StageConfig{Name: "read"}, counted)
	s = pipeline.Process(s, pipeline.StageConfig{Name: "eval", Workers: 3}, jitter)
	s = pipeline.Flush(s, pipeline.StageConfig{Name: "write"}, []pipeline.Writer[int, int]{
		pipeline.WriterFunc[int, int](func(context.Context, pipeline.Batch[int, int]) error { return nil }),
		pipeline.WriterFunc[int, int](func(context.Context, pipeline.Batch[int, int]) error { return nil }),
	})
	pipeline.Commit(s, pipeline.StageConfig{Name: "commit"}, func(ctx context.Context, b pipeline.Batch[int, int]) error {
		if b.Seq == 20 {
			stopped.Store(true)
			p.Stop()
		}
		return c.commit(ctx, b)
	})
	if err := wait(t, runAsync(context.Background(), p), 10*time.Second); err != nil {
		t.Fatalf("soft stop: got %v, want nil", err)
	}
	read, committed := src.count(), c.count()
	if read != committed {
		t.Fatalf("read %d batches but committed %d: soft stop lost in-flight work", read, committed)
	}
	if callsAfterStop.Load() > 1 {
		t.Fatalf("source called %d times after Stop, want at most the one in progress", callsAfterStop.Load())
	}
	if c.last != committed {
		t.Fatalf("last progress %d, want %d", c.last, committed)
	}
}

func TestStopBeforeRunReadsNothing(t *testing.T) {
	src := &endless{}
	p := pipeline.New[int](pipeline.Config{Name: "early"})
	pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[int, int](src)),
		pipeline.StageConfig{Name: "commit"}, (&committer{}).commit)
	p.Stop()
	p.Stop() // idempotent
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if src.count() != 0 {
		t.Fatalf("source read %d batches after an early Stop", src.count())
	}
}

// TestDrainingWakesBlockedSource: a source waiting for input (an idle
// replication stream) learns about the soft stop through Draining.
func TestDrainingWakesBlockedSource(t *testing.T) {
	calls := 0
	src := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
		calls++
		if calls == 1 {
			return pipeline.Batch[int, int]{Rows: 1, Progress: 1}, nil
		}
		select {
		case <-pipeline.Draining(ctx):
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		case <-ctx.Done():
			return pipeline.Batch[int, int]{}, ctx.Err()
		}
	})
	committedFirst := make(chan struct{})
	c := &committer{}
	p := pipeline.New[int](pipeline.Config{Name: "idle"})
	pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), pipeline.StageConfig{Name: "commit"},
		func(ctx context.Context, b pipeline.Batch[int, int]) error {
			defer close(committedFirst)
			return c.commit(ctx, b)
		})
	done := runAsync(context.Background(), p)
	<-committedFirst
	p.Stop()
	if err := wait(t, done, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if c.count() != 1 || c.last != 1 {
		t.Fatalf("committed %d batches up to %d, want 1 up to 1", c.count(), c.last)
	}
	if pipeline.Draining(context.Background()) != nil {
		t.Fatal("Draining outside a run must be nil")
	}
}

// TestHardStopAbortsStuckWriter: cancelling Run's context while a writer is
// stuck aborts promptly with the context's error, and the stuck batch (never
// durable) and everything after it are never committed.
func TestHardStopAbortsStuckWriter(t *testing.T) {
	const stuckAt = 6
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck := make(chan struct{})
	var once sync.Once
	write := func(ctx context.Context, b pipeline.Batch[int, int]) error {
		if b.Seq == stuckAt {
			once.Do(func() { close(stuck) })
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	c := &committer{}
	p := pipeline.New[int](pipeline.Config{Name: "hard"})
	s := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[int, int](&endless{}))
	s = pipeline.Flush(s, pipeline.StageConfig{Name: "write"}, []pipeline.Writer[int, int]{
		pipeline.WriterFunc[int, int](write), pipeline.WriterFunc[int, int](write),
	})
	pipeline.Commit(s, pipeline.StageConfig{Name: "commit"}, c.commit)
	done := runAsync(ctx, p)
	<-stuck
	cancel()
	err := wait(t, done, 10*time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	var se *pipeline.StageError
	if errors.As(err, &se) {
		t.Fatalf("hard stop reported as a stage failure: %v", err)
	}
	if c.count() > stuckAt {
		t.Fatalf("committed %d batches, but batch %d never became durable", c.count(), stuckAt)
	}
}

// TestHardStopCommitsNothingMore: batches that are durable and waiting for
// the commit when the hard stop comes are not committed: the caller asked to
// abort, not to drain.
func TestHardStopCommitsNothingMore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flushed5 := make(chan struct{})
	write := func(_ context.Context, b pipeline.Batch[int, int]) error {
		if b.Seq == 5 {
			close(flushed5)
		}
		return nil
	}
	stuck := make(chan struct{})
	c := &committer{}
	p := pipeline.New[int](pipeline.Config{Name: "hard"})
	s := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[int, int](&endless{}))
	s = pipeline.Flush(s, pipeline.StageConfig{Name: "write"}, []pipeline.Writer[int, int]{
		pipeline.WriterFunc[int, int](write), pipeline.WriterFunc[int, int](write),
	})
	pipeline.Commit(s, pipeline.StageConfig{Name: "commit"}, func(ctx context.Context, b pipeline.Batch[int, int]) error {
		if b.Seq == 2 {
			// A commit that ignores cancellation and succeeds anyway.
			close(stuck)
			<-ctx.Done()
		}
		return c.commit(ctx, b)
	})
	done := runAsync(ctx, p)
	<-stuck
	<-flushed5 // batches 3..5 are durable and queued for commit
	cancel()
	if err := wait(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if c.count() != 3 {
		t.Fatalf("committed %d batches after the hard stop at batch 2, want exactly 3 (0..2)", c.count())
	}
}
