package stages_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/stages"
)

// fakeSink is a sink with flush_writers writers that records which
// writers a run asked for and that every batch was written before its
// commit.
type fakeSink struct {
	mu        sync.Mutex
	writers   []int
	durable   map[uint64]bool
	violation string
}

func (s *fakeSink) Writer(_ context.Context, i int) (sinks.Writer, error) {
	s.mu.Lock()
	s.writers = append(s.writers, i)
	s.mu.Unlock()
	return pipeline.WriterFunc[model.Change, sinks.Position](func(_ context.Context, b sinks.Batch) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.durable == nil {
			s.durable = map[uint64]bool{}
		}
		s.durable[b.Seq] = true
		return nil
	}), nil
}

func (s *fakeSink) Commit(_ context.Context, b sinks.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.durable[b.Seq] && s.violation == "" {
		s.violation = fmt.Sprintf("batch %d committed before it was written", b.Seq)
	}
	return nil
}

func (s *fakeSink) Resume(context.Context, string, int) (sinks.Position, bool, error) {
	return sinks.Position{}, false, nil
}

func (s *fakeSink) Close(context.Context) error { return nil }

// orderedSink is a sink that asks for everything Chain offers: one
// ordered stream writer that prepares ahead, and publishing commits.
type orderedSink struct {
	fakeSink
	streamWriters int
	prepared      []uint64 // seqs in Prepare order
	written       []uint64 // seqs in Write order
	wrongSide     []uint64 // batches whose Write found another batch's preparation
	published     []bool
}

var preparedSeq = pipeline.NewKey[uint64]("prepared seq")

func (s *orderedSink) StreamWriter(context.Context) (sinks.Writer, error) {
	s.streamWriters++
	return orderedWriter{s}, nil
}

type orderedWriter struct{ s *orderedSink }

func (w orderedWriter) Prepare(_ context.Context, b sinks.Batch) (sinks.Batch, error) {
	w.s.mu.Lock()
	w.s.prepared = append(w.s.prepared, b.Seq)
	w.s.mu.Unlock()
	pipeline.Attach(&b, preparedSeq, b.Seq)
	return b, nil
}

func (w orderedWriter) Write(_ context.Context, b sinks.Batch) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.written = append(w.s.written, b.Seq)
	if seq, ok := pipeline.Attached(b, preparedSeq); !ok || seq != b.Seq {
		w.s.wrongSide = append(w.s.wrongSide, b.Seq)
	}
	return nil
}

// CommitPublish publishes at every even LSN.
func (s *orderedSink) CommitPublish(_ context.Context, b sinks.Batch) (bool, error) {
	return b.Progress.LSN%2 == 0, nil
}

// rowSource emits n batches of no rows (Chain's wiring, not evaluation, is
// under test) with stream positions 1…n.
func rowSource(n int) pipeline.SourceFunc[stages.RowChange, sinks.Position] {
	i := 0
	return func(context.Context) (pipeline.Batch[stages.RowChange, sinks.Position], error) {
		if i == n {
			return pipeline.Batch[stages.RowChange, sinks.Position]{}, pipeline.ErrEndOfInput
		}
		i++
		return pipeline.Batch[stages.RowChange, sinks.Position]{Rows: 1, Progress: sinks.Position{LSN: uint64(i)}}, nil
	}
}

// stageNames records the stage names a run's batches pass.
type stageNames struct {
	mu    sync.Mutex
	names []string
}

func (t *stageNames) StageStart(ctx context.Context, info pipeline.StageInfo) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.names, info.Stage) {
		t.names = append(t.names, info.Stage)
	}
	return ctx
}

func (t *stageNames) StageEnd(context.Context, pipeline.StageEndInfo) {}

func runChain(t *testing.T, sink sinks.Sink, c stages.ChainConfig) []string {
	t.Helper()
	names := &stageNames{}
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "chain", Tracer: names})
	in := pipeline.From(p, pipeline.StageConfig{Name: "read"}, rowSource(40))
	if err := stages.Chain(context.Background(), in, sink, c); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return names.names
}

// The stream of an OrderedStream sink gets one writer, in Seq order, with
// its Prepare as the probe stage ahead of it and each batch's preparation
// on that batch; commits report what the Publisher published.
func TestChainOrderedStream(t *testing.T) {
	s := &orderedSink{}
	var mu sync.Mutex
	names := runChain(t, s, stages.ChainConfig{EvalWorkers: 3, FlushWriters: 4, Stream: true,
		OnCommit: func(_ context.Context, b sinks.Batch, published bool) error {
			mu.Lock()
			defer mu.Unlock()
			if want := b.Progress.LSN%2 == 0; published != want {
				return fmt.Errorf("batch at LSN %d: published %v, want %v", b.Progress.LSN, published, want)
			}
			s.published = append(s.published, published)
			return nil
		}})
	if want := []string{"read", stages.StageEval, stages.StageBuild, sinks.StagePrepare, sinks.StageFlush, sinks.StageCommit}; !slices.Equal(names, want) {
		t.Errorf("stages %v, want %v", names, want)
	}
	if s.streamWriters != 1 || len(s.writers) != 0 {
		t.Errorf("%d stream writers and flush writers %v, want one stream writer only", s.streamWriters, s.writers)
	}
	if !slices.IsSorted(s.prepared) || !slices.IsSorted(s.written) || len(s.written) != 40 {
		t.Errorf("prepared %v, written %v: want all 40 in Seq order", s.prepared, s.written)
	}
	if len(s.wrongSide) > 0 {
		t.Errorf("batches %v were written without their own preparation", s.wrongSide)
	}
	if len(s.published) != 40 {
		t.Errorf("OnCommit saw %d commits, want 40", len(s.published))
	}
}

// Snapshot runs of an OrderedStream sink, and the stream of any other
// sink, use flush_writers writers and no probe stage.
func TestChainFlushWriters(t *testing.T) {
	for _, c := range []struct {
		name   string
		sink   sinks.Sink
		stream bool
	}{
		{"ordered sink, snapshot", &orderedSink{}, false},
		{"plain sink, stream", &fakeSink{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			names := runChain(t, c.sink, stages.ChainConfig{FlushWriters: 3, Stream: c.stream})
			if want := []string{"read", stages.StageEval, stages.StageBuild, sinks.StageFlush, sinks.StageCommit}; !slices.Equal(names, want) {
				t.Errorf("stages %v, want %v", names, want)
			}
			var writers []int
			switch s := c.sink.(type) {
			case *orderedSink:
				writers = s.writers
			case *fakeSink:
				writers = s.writers
				if s.violation != "" {
					t.Error(s.violation)
				}
			}
			if len(writers) != 3 {
				t.Errorf("flush writers %v, want 3", writers)
			}
		})
	}
}
