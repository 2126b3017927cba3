package stages

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
)

// ChainConfig sizes and observes one run's chain (see Chain).
type ChainConfig struct {
	// EvalWorkers is the number of goroutines of the eval stage and of the
	// build stage each (at least one).
	EvalWorkers int
	// FlushWriters is the number of flush lanes (at least one), unless the
	// run is the stream of an OrderedStream sink.
	FlushWriters int
	// Stream marks the run as a stream run (Position.IsStream batches).
	Stream bool
	// OnRowError is told about rows whose sync rules failed; may be nil.
	OnRowError RowErrorFunc
	// OnCommit, when set, is called after each batch's commit returned
	// nil, in Seq order, from the commit goroutine; published is what
	// Publisher reported, true for other sinks. Its error fails the run.
	OnCommit func(ctx context.Context, b sinks.Batch, published bool) error
}

// Chain wires the stages every replication pipeline runs from decoded row
// changes to its sink, for snapshot ranges and for the stream alike:
//
//	in → eval → build → [probe: Prepare] → flush → commit (→ OnCommit)
//
// eval and build are Eval and Build; flush has
// c.FlushWriters writers from sink.Writer, or for the stream of an
// sinks.OrderedStream sink its one StreamWriter, with eval and build keeping
// batch order and, if that writer is a Preparer, the probe stage ahead of
// it; commit calls sink.Commit (sinks.Publisher.CommitPublish if
// implemented)
// in Seq order. ctx bounds the creation of the writers; the caller runs
// the pipeline in's stream belongs to.
func Chain(ctx context.Context, in *pipeline.Stream[RowChange, sinks.Position], sink sinks.Sink, c ChainConfig) error {
	if sink == nil {
		return errors.New("nil sink")
	}
	os, ordered := sink.(sinks.OrderedStream)
	ordered = ordered && c.Stream
	workers := max(c.EvalWorkers, 1)
	built := Build(Eval(in, pipeline.StageConfig{Workers: workers, Ordered: ordered}, c.OnRowError),
		pipeline.StageConfig{Workers: workers, Ordered: ordered})
	var ws []sinks.Writer
	if ordered {
		w, err := os.StreamWriter(ctx)
		if err != nil {
			return fmt.Errorf("sink stream writer: %w", err)
		}
		if p, ok := w.(sinks.Preparer); ok {
			built = pipeline.Process(built, pipeline.StageConfig{Name: sinks.StagePrepare}, p.Prepare)
		}
		ws = []sinks.Writer{w}
	} else {
		var err error
		if ws, err = sinks.Writers(ctx, sink, c.FlushWriters); err != nil {
			return err
		}
	}
	flushed := pipeline.Flush(built, pipeline.StageConfig{Name: sinks.StageFlush}, ws)
	pipeline.Commit(flushed, pipeline.StageConfig{Name: sinks.StageCommit}, commitFunc(sink, c.OnCommit))
	return nil
}

// commitFunc is the commit stage's function: the sink's commit, then
// onCommit.
func commitFunc(sink sinks.Sink, onCommit func(context.Context, sinks.Batch, bool) error) pipeline.CommitFunc[model.Change, sinks.Position] {
	pub, isPub := sink.(sinks.Publisher)
	if onCommit == nil {
		return sink.Commit
	}
	return func(ctx context.Context, b sinks.Batch) error {
		published := true
		var err error
		if isPub {
			published, err = pub.CommitPublish(ctx, b)
		} else {
			err = sink.Commit(ctx, b)
		}
		if err != nil || onCommit == nil {
			return err
		}
		return onCommit(ctx, b, published)
	}
}
