package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncpipe/syncpipe/pipeline"
)

func TestRunTypedStagesCommitsEverything(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "basic"})
	rows := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(100))
	strs := pipeline.Process(rows, pipeline.StageConfig{Name: "format", Workers: 3},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[string, int], error) {
			out := make([]string, len(b.Items))
			for i, v := range b.Items {
				out[i] = strconv.Itoa(v)
			}
			// Seq and Progress are deliberately garbled: the framework must restore them.
			r := pipeline.Derive(b, out)
			r.Seq, r.Progress = 999, -1
			return r, nil
		})
	var got []string
	last := 0
	pipeline.Commit(strs, pipeline.StageConfig{Name: "commit"}, func(_ context.Context, b pipeline.Batch[string, int]) error {
		if b.Progress != last+1 || b.Rows != 1 || b.Bytes != 8 {
			return errors.New("batch metadata not carried: " + strconv.Itoa(b.Progress))
		}
		last = b.Progress
		got = append(got, b.Items...)
		return nil
	})
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || last != 100 {
		t.Fatalf("committed %d items, last progress %d; want 100, 100", len(got), last)
	}
	for i, s := range got {
		if s != strconv.Itoa(i) {
			t.Fatalf("item %d = %q: commit out of order", i, s)
		}
	}
	if err := p.Run(context.Background()); !errors.Is(err, pipeline.ErrAlreadyRun) {
		t.Fatalf("second Run: got %v, want ErrAlreadyRun", err)
	}
}

func TestWiringMistakesReportedTogether(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "bad"})
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(1))
	a := pipeline.Process(src, pipeline.StageConfig{Name: "a"}, identity[int])
	pipeline.Process(src, pipeline.StageConfig{Name: "a"}, identity[int]) // consumed twice, duplicate name
	pipeline.Process[int, int](a, pipeline.StageConfig{Name: "nil"}, nil)
	pipeline.Flush(a, pipeline.StageConfig{Name: ""}, []pipeline.Writer[int, int]{nil})
	err := p.Run(context.Background())
	if err == nil {
		t.Fatal("Run accepted a broken pipeline")
	}
	for _, want := range []string{
		"already consumed", "duplicate stage name", "nil ProcessFunc", "without a name",
		"writer 0 is nil", "no commit stage", "is not consumed",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestEmptyPipelineReportsMissingSource(t *testing.T) {
	err := pipeline.New[int](pipeline.Config{}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no source") {
		t.Fatalf("got %v, want a missing-source error", err)
	}
}

func TestOrderedStageEmitsInSeqOrder(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "ordered"})
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(2000))
	jittered := pipeline.Process(src, pipeline.StageConfig{Name: "jitter", Workers: 4, Ordered: true}, jitter)
	var seen []uint64
	checked := pipeline.Process(jittered, pipeline.StageConfig{Name: "observe"},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
			seen = append(seen, b.Seq) // one worker: no lock needed
			return b, nil
		})
	c := &committer{}
	pipeline.Commit(checked, pipeline.StageConfig{Name: "commit"}, c.commit)
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, s := range seen {
		if s != uint64(i) {
			t.Fatalf("ordered stage emitted seq %d at position %d", s, i)
		}
	}
	if len(seen) != 2000 {
		t.Fatalf("saw %d batches, want 2000", len(seen))
	}
}

// TestProcessWorkersGivesEachWorkerItsOwnFunc checks that every worker
// runs the function made for it, so per-worker state needs no locking.
func TestProcessWorkersGivesEachWorkerItsOwnFunc(t *testing.T) {
	const workers, batches = 3, 60
	p := pipeline.New[int](pipeline.Config{Name: "workers"})
	n := 0
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[int, int](func(context.Context) (pipeline.Batch[int, int], error) {
		if n == batches {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		n++
		return pipeline.Batch[int, int]{Items: []int{n}, Progress: n}, nil
	}))
	made := make([]int, workers)
	used := make([]int, workers) // each written only by its own worker
	out := pipeline.ProcessWorkers(src, pipeline.StageConfig{Name: "eval", Workers: workers},
		func(w int) pipeline.ProcessFunc[int, int, int] {
			made[w]++
			return func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
				used[w]++
				return b, nil
			}
		})
	committed := 0
	pipeline.Commit(out, pipeline.StageConfig{Name: "commit"}, func(context.Context, pipeline.Batch[int, int]) error {
		committed++
		return nil
	})
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	total := 0
	for w := range workers {
		if made[w] != 1 {
			t.Fatalf("factory called %d times for worker %d, want 1", made[w], w)
		}
		total += used[w]
	}
	if total != batches || committed != batches {
		t.Fatalf("processed %d, committed %d, want %d", total, committed, batches)
	}
}

// TestMaxInFlightBoundsUncommittedBatches: with MaxInFlight 2 the source
// is never asked for a batch while two are uncommitted, however deep the
// channels, and everything is still committed in order.
func TestMaxInFlightBoundsUncommittedBatches(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "bounded", Depth: 8, MaxInFlight: 2})
	var handed, committed, worst atomic.Int64
	n := 0
	rows := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[int, int](func(context.Context) (pipeline.Batch[int, int], error) {
		if n == 50 {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		n++
		if out := handed.Add(1) - committed.Load(); out > worst.Load() {
			worst.Store(out)
		}
		return pipeline.Batch[int, int]{Items: []int{n}, Progress: n}, nil
	}))
	same := pipeline.Process(rows, pipeline.StageConfig{Name: "pass", Workers: 3, Ordered: true},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) { return b, nil })
	last := 0
	pipeline.Commit(same, pipeline.StageConfig{Name: "commit"}, func(_ context.Context, b pipeline.Batch[int, int]) error {
		if b.Progress != last+1 {
			return errors.New("out of order")
		}
		last = b.Progress
		committed.Add(1)
		return nil
	})
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if last != 50 || worst.Load() > 2 {
		t.Fatalf("committed up to %d, at most %d batches uncommitted; want 50 and at most 2", last, worst.Load())
	}
}
