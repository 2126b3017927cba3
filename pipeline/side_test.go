package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/syncpipe/syncpipe/pipeline"
)

var (
	sourceNote = pipeline.NewKey[string]("source note")
	stageNote  = pipeline.NewKey[int]("stage note")
)

// Side data attached by the source and by a stage reaches the writer and
// the commit of its own batch, through a stage that derives its output, a
// stage that builds it by hand, and several unordered workers.
func TestSideDataTravelsWithItsBatch(t *testing.T) {
	p := pipeline.New[int](pipeline.Config{Name: "side"})
	n := 0
	src := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[int, int](
		func(context.Context) (pipeline.Batch[int, int], error) {
			if n == 50 {
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			}
			b := pipeline.Batch[int, int]{Rows: 1, Progress: n, Items: []int{n}}
			pipeline.Attach(&b, sourceNote, strconv.Itoa(n))
			n++
			return b, nil
		}))
	noted := pipeline.Process(src, pipeline.StageConfig{Name: "note", Workers: 4},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
			out := pipeline.Derive(b, b.Items)
			pipeline.Attach(&out, stageNote, b.Items[0]*2)
			return out, nil
		})
	byHand := pipeline.Process(noted, pipeline.StageConfig{Name: "by-hand", Workers: 3},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[int, int], error) {
			return pipeline.Batch[int, int]{Rows: b.Rows, Items: b.Items}, nil
		})
	check := func(b pipeline.Batch[int, int]) error {
		s, ok1 := pipeline.Attached(b, sourceNote)
		v, ok2 := pipeline.Attached(b, stageNote)
		if !ok1 || !ok2 || s != strconv.Itoa(b.Progress) || v != 2*b.Progress {
			return fmt.Errorf("batch %d: side data %q %v, %d %v", b.Seq, s, ok1, v, ok2)
		}
		return nil
	}
	flushed := pipeline.Flush(byHand, pipeline.StageConfig{Name: "flush"}, []pipeline.Writer[int, int]{
		pipeline.WriterFunc[int, int](func(_ context.Context, b pipeline.Batch[int, int]) error { return check(b) }),
		pipeline.WriterFunc[int, int](func(_ context.Context, b pipeline.Batch[int, int]) error { return check(b) }),
	})
	commits := 0
	pipeline.Commit(flushed, pipeline.StageConfig{Name: "commit"}, func(_ context.Context, b pipeline.Batch[int, int]) error {
		commits++
		return check(b)
	})
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if commits != 50 {
		t.Fatalf("%d commits, want 50", commits)
	}
}

// Attach replaces a value under its key without changing the batch it was
// derived from.
func TestAttachCopiesOnWrite(t *testing.T) {
	var a pipeline.Batch[int, int]
	pipeline.Attach(&a, stageNote, 1)
	b := pipeline.Derive(a, []int{})
	pipeline.Attach(&b, stageNote, 2)
	if v, _ := pipeline.Attached(a, stageNote); v != 1 {
		t.Fatalf("a holds %d after attaching to b, want 1", v)
	}
	if v, _ := pipeline.Attached(b, stageNote); v != 2 {
		t.Fatalf("b holds %d, want 2", v)
	}
	if _, ok := pipeline.Attached(b, sourceNote); ok {
		t.Fatal("b holds a value under a key nothing attached to")
	}
}
