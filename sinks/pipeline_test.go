package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
)

// fakeSink records what the pipeline does to it and checks the Sink
// contract as it goes: a commit must only come after its batch and all
// earlier ones were written.
type fakeSink struct {
	writerErr error // returned by Writer for i == 1
	writeErr  error // returned by every Write

	mu        sync.Mutex
	writers   []int
	durable   map[uint64]bool
	rows      []string
	committed []uint64 // LSNs in commit order
	violation string
}

func (s *fakeSink) Writer(_ context.Context, i int) (sinks.Writer, error) {
	if i == 1 && s.writerErr != nil {
		return nil, s.writerErr
	}
	s.mu.Lock()
	s.writers = append(s.writers, i)
	s.mu.Unlock()
	return pipeline.WriterFunc[model.Change, sinks.Position](func(_ context.Context, b sinks.Batch) error {
		if s.writeErr != nil {
			return s.writeErr
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.durable == nil {
			s.durable = map[uint64]bool{}
		}
		s.durable[b.Seq] = true
		for _, c := range b.Items {
			s.rows = append(s.rows, c.Table.Name)
		}
		return nil
	}), nil
}

func (s *fakeSink) Commit(_ context.Context, b sinks.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq := range b.Seq + 1 {
		if !s.durable[seq] && s.violation == "" {
			s.violation = fmt.Sprintf("batch %d committed before batch %d was written", b.Seq, seq)
		}
	}
	s.committed = append(s.committed, b.Progress.LSN)
	return nil
}

func (s *fakeSink) Resume(context.Context, string, int) (sinks.Position, bool, error) {
	return sinks.Position{}, false, nil
}

func (s *fakeSink) Close(context.Context) error { return nil }

// streamSource returns n batches of two changes each; batch i ends at LSN
// 100*(i+1).
func streamSource(n int) pipeline.Source[model.Change, sinks.Position] {
	tbl := &model.Table{Schema: "public", Name: "todos"}
	i := 0
	return pipeline.SourceFunc[model.Change, sinks.Position](func(context.Context) (sinks.Batch, error) {
		if i == n {
			return sinks.Batch{}, pipeline.ErrEndOfInput
		}
		i++
		items := []model.Change{{Table: tbl, Kind: model.Upsert}, {Table: tbl, Kind: model.Delete}}
		return sinks.Batch{Rows: len(items), Items: items, Progress: sinks.Position{LSN: uint64(100 * i)}}, nil
	})
}

func TestNewPipelineFlushesAndCommitsInOrder(t *testing.T) {
	s := &fakeSink{}
	p, err := sinks.NewPipeline(context.Background(), "stream", streamSource(20), s, config.Stages{FlushWriters: 3, ChannelDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Name() != "stream" {
		t.Errorf("Name = %q", p.Name())
	}
	if s.violation != "" {
		t.Error(s.violation)
	}
	slices.Sort(s.writers)
	if !slices.Equal(s.writers, []int{0, 1, 2}) {
		t.Errorf("writers created: %v; want 0, 1, 2", s.writers)
	}
	if len(s.rows) != 40 {
		t.Errorf("%d rows written; want 40", len(s.rows))
	}
	if len(s.committed) != 20 {
		t.Fatalf("%d commits; want 20", len(s.committed))
	}
	for i, lsn := range s.committed {
		if lsn != uint64(100*(i+1)) {
			t.Fatalf("commit %d at LSN %d; want %d (commits %v)", i, lsn, 100*(i+1), s.committed)
		}
	}
}

func TestNewPipelineDefaultsToOneWriter(t *testing.T) {
	s := &fakeSink{}
	p, err := sinks.NewPipeline(context.Background(), "one", streamSource(2), s, config.Stages{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.writers, []int{0}) || len(s.committed) != 2 {
		t.Errorf("writers %v, commits %v", s.writers, s.committed)
	}
}

func TestNewPipelineWriterCreationFails(t *testing.T) {
	bad := errors.New("no connection")
	_, err := sinks.NewPipeline(context.Background(), "w", streamSource(1), &fakeSink{writerErr: bad}, config.Stages{FlushWriters: 2})
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "pipeline w: sink writer 1") {
		t.Errorf("err = %v", err)
	}
	if _, err := sinks.NewPipeline(context.Background(), "nil", streamSource(1), nil, config.Stages{}); err == nil {
		t.Error("nil sink accepted")
	}
}

func TestWriteFailureStopsBeforeCommit(t *testing.T) {
	bad := errors.New("disk full")
	s := &fakeSink{writeErr: bad}
	p, err := sinks.NewPipeline(context.Background(), "fail", streamSource(5), s, config.Stages{FlushWriters: 2})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	var se *pipeline.StageError
	if !errors.Is(err, bad) || !errors.As(err, &se) || se.Stage != sinks.StageFlush {
		t.Errorf("err = %v; want the write error from stage %s", err, sinks.StageFlush)
	}
	if len(s.committed) != 0 {
		t.Errorf("committed %v after failed writes", s.committed)
	}
}

// FlushAndCommit ends a pipeline that has its own stages before the sink.
func TestFlushAndCommitAfterProcessStage(t *testing.T) {
	s := &fakeSink{}
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "custom"})
	in := pipeline.From(p, pipeline.StageConfig{Name: "read"}, streamSource(3))
	renamed := pipeline.Process(in, pipeline.StageConfig{Name: "rename", Workers: 2},
		func(_ context.Context, b sinks.Batch) (sinks.Batch, error) {
			out := make([]model.Change, len(b.Items))
			for i, c := range b.Items {
				c.Table = &model.Table{Schema: "public", Name: "renamed"}
				out[i] = c
			}
			return pipeline.Derive(b, out), nil
		})
	if err := sinks.FlushAndCommit(context.Background(), renamed, s, 2); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.rows) != 6 || s.rows[0] != "renamed" || len(s.committed) != 3 || s.violation != "" {
		t.Errorf("rows %v, commits %v, %s", s.rows, s.committed, s.violation)
	}
}
