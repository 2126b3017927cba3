package pipeline_test

import (
	"context"
	"testing"

	"github.com/syncpipe/syncpipe/pipeline"
)

// benchPipeline pushes b.N batches through source → `stages` pass-through
// Process stages → optional flush → commit and reports the framework cost
// per batch per stage. The stage functions do no work, so everything measured
// is framework: channel hand-offs, sequencing, reordering and hooks.
func benchPipeline(b *testing.B, stages, workers, writers int, ordered bool, tracer pipeline.StageTracer) {
	items := make([]int, 10_000) // shared payload: what a batch carries does not matter
	n := b.N
	src := pipeline.SourceFunc[int, int](func(context.Context) (pipeline.Batch[int, int], error) {
		if n == 0 {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		n--
		return pipeline.Batch[int, int]{Rows: len(items), Bytes: 80_000, Progress: n, Items: items}, nil
	})
	p := pipeline.New[int](pipeline.Config{Name: "bench", Tracer: tracer})
	s := pipeline.From(p, pipeline.StageConfig{Name: "read"}, src)
	names := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"}
	for i := range stages {
		s = pipeline.Process(s, pipeline.StageConfig{Name: names[i], Workers: workers, Ordered: ordered}, identity[int])
	}
	total := stages + 2
	if writers > 0 {
		ws := make([]pipeline.Writer[int, int], writers)
		for i := range ws {
			ws[i] = pipeline.WriterFunc[int, int](func(context.Context, pipeline.Batch[int, int]) error { return nil })
		}
		s = pipeline.Flush(s, pipeline.StageConfig{Name: "write"}, ws)
		total++
	}
	committed := 0
	pipeline.Commit(s, pipeline.StageConfig{Name: "commit"}, func(context.Context, pipeline.Batch[int, int]) error {
		committed++
		return nil
	})
	b.ReportAllocs()
	b.ResetTimer()
	if err := p.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if committed != b.N {
		b.Fatalf("committed %d of %d", committed, b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(total), "ns/batch/stage")
}

// BenchmarkPipeline measures per-batch framework overhead; ns/op and
// allocs/op are per batch through the whole pipeline, ns/batch/stage divides
// by the number of stages (source and commit included).
func BenchmarkPipeline(b *testing.B) {
	b.Run("stages=1", func(b *testing.B) { benchPipeline(b, 1, 1, 0, false, nil) })
	b.Run("stages=4", func(b *testing.B) { benchPipeline(b, 4, 1, 0, false, nil) })
	b.Run("stages=1/workers=2", func(b *testing.B) { benchPipeline(b, 1, 2, 0, false, nil) })
	b.Run("stages=1/workers=2/ordered", func(b *testing.B) { benchPipeline(b, 1, 2, 0, true, nil) })
	b.Run("stages=1/flush=2", func(b *testing.B) { benchPipeline(b, 1, 2, 2, false, nil) })
	b.Run("stages=1/flush=2/summary", func(b *testing.B) { benchPipeline(b, 1, 2, 2, false, pipeline.NewSummary()) })
}
