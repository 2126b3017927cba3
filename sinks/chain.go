package sinks

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/stages"
)

// StagePrepare names the stage that runs a Preparer (see Chain), in stage
// errors, spans and summaries.
const StagePrepare = "probe"

// OrderedStream is implemented by a sink whose stream changes must apply
// in stream order: later changes of a row overwrite earlier ones and the
// sink reads what it wrote before (bucket storage: a row's stored state,
// its ops' checksums). For a stream run of such a sink, Chain ignores
// flush_writers and asks StreamWriter for the run's one writer; every
// stage before it keeps batches in Seq order, so the writer receives them
// in order, one at a time. Snapshot runs still use Writer and
// flush_writers: rows of a key range are written once each.
type OrderedStream interface {
	// StreamWriter returns the one writer of a new stream run. It is
	// called once per stream run, before the run starts; the writer may
	// keep what it learns from batch to batch (what it wrote, buffers)
	// for the run's life. If the writer is also a Preparer, Chain runs
	// its Prepare as a stage of its own ahead of Write.
	StreamWriter(ctx context.Context) (Writer, error)
}

// Preparer is implemented by an OrderedStream sink's stream writer that
// can do part of a batch's work before its Write, while the batch before
// it is being written (bucket storage reads the stored state of the
// batch's rows). Chain runs Prepare as the StagePrepare stage between
// build and flush, on one goroutine, for every batch in Seq order, so
// Prepare of batch k+1 runs concurrently with Write of batch k, never with
// another Prepare. Prepare returns the batch to write, carrying what it
// prepared as side data (pipeline.Attach with a key of the sink's own);
// Write finds it there, on exactly that batch. A batch prepared but never
// written (the run failed in between) is dropped with what it carries.
type Preparer interface {
	Prepare(ctx context.Context, b Batch) (Batch, error)
}

// Publisher is implemented by a sink whose stream commits publish
// checkpoints: a commit makes its batch and every earlier one visible to
// readers at once, and durable (on disk) with them, but not every commit
// publishes one — not inside a source transaction, for example, and a
// sink may defer the disk flush of a commit that publishes nothing.
// Chain calls CommitPublish instead of Commit, with the same guarantees as
// Commit, and hands published to ChainConfig.OnCommit: the assembly needs
// it to tell what may be acknowledged to the source and when a group has
// caught up. For a sink without it, every commit counts as published
// (Commit made the batch durable).
type Publisher interface {
	CommitPublish(ctx context.Context, b Batch) (published bool, err error)
}

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
	OnRowError stages.RowErrorFunc
	// OnCommit, when set, is called after each batch's commit returned
	// nil, in Seq order, from the commit goroutine; published is what
	// Publisher reported, true for other sinks. Its error fails the run.
	OnCommit func(ctx context.Context, b Batch, published bool) error
}

// Chain wires the stages every replication pipeline runs from decoded row
// changes to its sink, for snapshot ranges and for the stream alike:
//
//	in → eval → build → [probe: Prepare] → flush → commit (→ OnCommit)
//
// eval and build are stages.Eval and stages.Build; flush has
// c.FlushWriters writers from sink.Writer, or for the stream of an
// OrderedStream sink its one StreamWriter, with eval and build keeping
// batch order and, if that writer is a Preparer, the probe stage ahead of
// it; commit calls sink.Commit (Publisher.CommitPublish if implemented)
// in Seq order. ctx bounds the creation of the writers; the caller runs
// the pipeline in's stream belongs to.
func Chain(ctx context.Context, in *pipeline.Stream[stages.RowChange, Position], sink Sink, c ChainConfig) error {
	if sink == nil {
		return errors.New("nil sink")
	}
	os, ordered := sink.(OrderedStream)
	ordered = ordered && c.Stream
	workers := max(c.EvalWorkers, 1)
	built := stages.Build(stages.Eval(in, pipeline.StageConfig{Workers: workers, Ordered: ordered}, c.OnRowError),
		pipeline.StageConfig{Workers: workers, Ordered: ordered})
	var ws []Writer
	if ordered {
		w, err := os.StreamWriter(ctx)
		if err != nil {
			return fmt.Errorf("sink stream writer: %w", err)
		}
		if p, ok := w.(Preparer); ok {
			built = pipeline.Process(built, pipeline.StageConfig{Name: StagePrepare}, p.Prepare)
		}
		ws = []Writer{w}
	} else {
		var err error
		if ws, err = newWriters(ctx, sink, c.FlushWriters); err != nil {
			return err
		}
	}
	flushed := pipeline.Flush(built, pipeline.StageConfig{Name: StageFlush}, ws)
	pipeline.Commit(flushed, pipeline.StageConfig{Name: StageCommit}, commitFunc(sink, c.OnCommit))
	return nil
}

// newWriters returns n (at least one) writers of a new run of sink.
func newWriters(ctx context.Context, sink Sink, n int) ([]Writer, error) {
	ws := make([]Writer, max(n, 1))
	for i := range ws {
		w, err := sink.Writer(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("sink writer %d: %w", i, err)
		}
		ws[i] = w
	}
	return ws, nil
}

// commitFunc is the commit stage's function: the sink's commit, then
// onCommit.
func commitFunc(sink Sink, onCommit func(context.Context, Batch, bool) error) pipeline.CommitFunc[model.Change, Position] {
	pub, isPub := sink.(Publisher)
	if onCommit == nil {
		return sink.Commit
	}
	return func(ctx context.Context, b Batch) error {
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
