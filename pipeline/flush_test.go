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

// rendezvousLimit bounds each wait of these tests for something the
// pipeline must do concurrently: a pipeline that does not gets an error
// after it (instead of hanging), so the test fails.
const rendezvousLimit = 10 * time.Second

// errNoOverlap is what a writer returns when what it waits for never
// happened while it was flushing.
var errNoOverlap = errors.New("never happened while this batch was being flushed")

// await waits for ch within rendezvousLimit.
func await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rendezvousLimit):
		return errNoOverlap
	}
}

// TestFlushOverlapsRead: batch k is flushed while batch k+1 is read. The
// writer of batch 1 finishes only once the source has started reading
// batch 2, which a pipeline that reads and flushes in turn never does.
func TestFlushOverlapsRead(t *testing.T) {
	const n = 3
	reading2 := make(chan struct{})
	read := 0
	src := pipeline.SourceFunc[int, int](func(context.Context) (pipeline.Batch[int, int], error) {
		if read == n {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		read++
		if read == 2 {
			close(reading2)
		}
		return pipeline.Batch[int, int]{Rows: 1, Progress: read}, nil
	})
	w := pipeline.WriterFunc[int, int](func(ctx context.Context, b pipeline.Batch[int, int]) error {
		if b.Progress == 1 {
			return await(ctx, reading2)
		}
		return nil
	})
	c := &committer{}
	p := pipeline.New[int](pipeline.Config{Name: "overlap"})
	pipeline.Commit(pipeline.Flush(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src),
		pipeline.StageConfig{Name: "write"}, []pipeline.Writer[int, int]{w}), pipeline.StageConfig{Name: "commit"}, c.commit)
	if err := p.Run(context.Background()); err != nil {
		t.Fatalf("the read of batch 2 did not overlap the flush of batch 1: %v", err)
	}
	if c.count() != n {
		t.Fatalf("committed %d of %d batches", c.count(), n)
	}
}

// TestTwoWritersFlushAtOnce: with two writers, two batches are flushed at
// the same time (the double-writer flush: when flushing is the bottleneck,
// the second writer is what shortens the run); the writer of batch 1
// finishes only once another flush has started. One writer never has two
// flushes in progress.
func TestTwoWritersFlushAtOnce(t *testing.T) {
	run := func(writers int, wait bool) (maxAtOnce int32, err error) {
		var inFlight atomic.Int32
		var once sync.Once
		second := make(chan struct{})
		ws := make([]pipeline.Writer[int, int], writers)
		for i := range ws {
			ws[i] = pipeline.WriterFunc[int, int](func(ctx context.Context, b pipeline.Batch[int, int]) error {
				v := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					old := atomic.LoadInt32(&maxAtOnce)
					if v <= old || atomic.CompareAndSwapInt32(&maxAtOnce, old, v) {
						break
					}
				}
				if v == 2 {
					once.Do(func() { close(second) })
				}
				if wait && b.Progress == 1 {
					return await(ctx, second)
				}
				return nil
			})
		}
		c := &committer{}
		p := pipeline.New[int](pipeline.Config{Name: "writers"})
		pipeline.Commit(pipeline.Flush(pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(20)),
			pipeline.StageConfig{Name: "write"}, ws), pipeline.StageConfig{Name: "commit"}, c.commit)
		err = p.Run(context.Background())
		if err == nil && c.count() != 20 {
			t.Fatalf("%d writers: committed %d of 20 batches", writers, c.count())
		}
		return maxAtOnce, err
	}
	if most, err := run(2, true); err != nil || most != 2 {
		t.Fatalf("two writers: %v, at most %d flushes at once; want two at once", err, most)
	}
	if most, err := run(1, false); err != nil || most != 1 {
		t.Fatalf("one writer: %v, at most %d flushes at once; want one", err, most)
	}
}
