package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

var errBoom = errors.New("boom")

// TestErrorInAnyStageStopsRunPromptly injects a failure at batch 5 into each
// stage in turn while another writer hangs on a batch until cancelled: Run
// must return the failure, located, without waiting for the hung writer, and
// commit nothing at or after the failed batch.
func TestErrorInAnyStageStopsRunPromptly(t *testing.T) {
	const failAt = 5
	for _, failing := range []string{"read", "eval", "write", "commit"} {
		t.Run(failing, func(t *testing.T) {
			fail := func(stage string, seq uint64) error {
				if stage == failing && seq == failAt {
					return errBoom
				}
				return nil
			}
			seq := uint64(0)
			src := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
				defer func() { seq++ }()
				return pipeline.Batch[int, int]{Rows: 1, Progress: int(seq) + 1}, fail("read", seq)
			})
			eval := func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
				return b, fail("eval", b.Seq)
			}
			write := func(_ context.Context, b pipeline.Batch[int, int]) error { return fail("write", b.Seq) }
			hang := func(ctx context.Context, b pipeline.Batch[int, int]) error {
				if b.Seq > failAt+2 { // slow storage that only a cancellation ends
					<-ctx.Done()
					return ctx.Err()
				}
				return fail("write", b.Seq)
			}
			var mu sync.Mutex
			var committed []uint64
			commit := func(_ context.Context, b pipeline.Batch[int, int]) error {
				if err := fail("commit", b.Seq); err != nil {
					return err
				}
				mu.Lock()
				committed = append(committed, b.Seq)
				mu.Unlock()
				return nil
			}

			p := pipeline.New[int](pipeline.Config{Name: "errs"})
			s := pipeline.From(p, pipeline.StageConfig{Name: "read"}, src)
			s = pipeline.Process(s, pipeline.StageConfig{Name: "eval", Workers: 2}, eval)
			s = pipeline.Flush(s, pipeline.StageConfig{Name: "write"}, []pipeline.Writer[int, int]{
				pipeline.WriterFunc[int, int](write), pipeline.WriterFunc[int, int](hang),
			})
			pipeline.Commit(s, pipeline.StageConfig{Name: "commit"}, commit)

			err := wait(t, runAsync(context.Background(), p), 10*time.Second)
			var se *pipeline.StageError
			if !errors.As(err, &se) || !errors.Is(err, errBoom) {
				t.Fatalf("got %v, want a StageError wrapping errBoom", err)
			}
			if se.Stage != failing || se.Seq != failAt || se.Pipeline != "errs" {
				t.Fatalf("error located at %s/%s seq %d, want errs/%s seq %d", se.Pipeline, se.Stage, se.Seq, failing, failAt)
			}
			if !strings.Contains(err.Error(), "stage "+failing) || !strings.Contains(err.Error(), "batch 5") {
				t.Fatalf("message %q lacks stage or batch", err)
			}
			for _, s := range committed {
				if s >= failAt {
					t.Fatalf("batch %d committed after batch %d failed", s, failAt)
				}
			}
		})
	}
}

func TestPanicInStageBecomesError(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "panics"})
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(10))
	bad := pipeline.Process(src, pipeline.StageConfig{Name: "eval"},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
			if b.Seq == 3 {
				panic("bad row")
			}
			return b, nil
		})
	pipeline.Commit(bad, pipeline.StageConfig{Name: "commit"}, (&committer{}).commit)
	err := p.Run(context.Background())
	var pe *pipeline.PanicError
	var se *pipeline.StageError
	if !errors.As(err, &pe) || !errors.As(err, &se) {
		t.Fatalf("got %v, want a StageError wrapping a PanicError", err)
	}
	if pe.Value != "bad row" || se.Seq != 3 || len(pe.Stack) == 0 {
		t.Fatalf("panic %v at seq %d, stack %d bytes", pe.Value, se.Seq, len(pe.Stack))
	}
}
