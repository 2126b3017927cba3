package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

// countSource emits n one-item batches; item i has progress i+1 (the number
// of rows done), like a snapshot chunk's "rows done" counter.
func countSource(n int) pipeline.SourceFunc[int, int] {
	next := 0
	return func(ctx context.Context) (pipeline.Batch[int, int], error) {
		if next >= n {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		b := pipeline.Batch[int, int]{Rows: 1, Bytes: 8, Progress: next + 1, Items: []int{next}}
		next++
		return b, nil
	}
}

// endless emits one-item batches until stopped, counting calls.
type endless struct {
	mu    sync.Mutex
	calls int
}

func (e *endless) Next(ctx context.Context) (pipeline.Batch[int, int], error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := e.calls
	e.calls++
	return pipeline.Batch[int, int]{Rows: 1, Progress: i + 1, Items: []int{i}}, nil
}

func (e *endless) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// committer records committed batches and checks that they arrive in order.
type committer struct {
	mu   sync.Mutex
	seqs []uint64
	last int // last committed progress
}

func (c *committer) commit(_ context.Context, b pipeline.Batch[int, int]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if want := uint64(len(c.seqs)); b.Seq != want {
		return fmt.Errorf("committed seq %d, want %d", b.Seq, want)
	}
	c.seqs = append(c.seqs, b.Seq)
	c.last = b.Progress
	return nil
}

func (c *committer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seqs)
}

// runAsync runs p in a goroutine and returns a channel with its result.
func runAsync(ctx context.Context, p interface{ Run(context.Context) error }) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return done
}

// wait returns the result of a run, failing the test if it takes longer than
// limit: a guard against hangs, not a synchronisation point.
func wait(t *testing.T, done <-chan error, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("run did not return within %v", limit)
		return nil
	}
}

func identity[T any](_ context.Context, b pipeline.Batch[T, int]) (pipeline.Batch[T, int], error) {
	return b, nil
}

// jitter yields the processor a random number of times so that parallel
// workers finish in a random order, without sleeping.
func jitter(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
	for range rand.IntN(20) {
		runtime.Gosched()
	}
	return b, nil
}

// runUntilYield runs, as a scheduler unit's work, a pipeline whose source
// reads nothing and waits on Draining: it returns what the pipeline's Run
// does once the scheduler asks the unit to yield (ErrYielded).
func runUntilYield(ctx context.Context) error {
	src := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
		select {
		case <-pipeline.Draining(ctx):
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		case <-ctx.Done():
			return pipeline.Batch[int, int]{}, ctx.Err()
		}
	})
	p := pipeline.New[int](pipeline.Config{Name: "wait"})
	pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), pipeline.StageConfig{Name: "commit"},
		func(context.Context, pipeline.Batch[int, int]) error { return nil })
	return p.Run(ctx)
}
