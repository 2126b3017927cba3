package sinks

import "context"

// The optional parts of the Sink contract: a sink implements what it
// needs, and stages.Chain (which wires every replication pipeline from
// decoded rows to its sink) finds them by type assertion.

// StagePrepare names the stage that runs a Preparer (see stages.Chain), in stage
// errors, spans and summaries.
const StagePrepare = "probe"

// OrderedStream is implemented by a sink whose stream changes must apply
// in stream order: later changes of a row overwrite earlier ones and the
// sink reads what it wrote before (bucket storage: a row's stored state,
// its ops' checksums). For a stream run of such a sink, stages.Chain ignores
// flush_writers and asks StreamWriter for the run's one writer; every
// stage before it keeps batches in Seq order, so the writer receives them
// in order, one at a time. Snapshot runs still use Writer and
// flush_writers: rows of a key range are written once each.
type OrderedStream interface {
	// StreamWriter returns the one writer of a new stream run. It is
	// called once per stream run, before the run starts; the writer may
	// keep what it learns from batch to batch (what it wrote, buffers)
	// for the run's life. If the writer is also a Preparer, stages.Chain runs
	// its Prepare as a stage of its own ahead of Write.
	StreamWriter(ctx context.Context) (Writer, error)
}

// Preparer is implemented by an OrderedStream sink's stream writer that
// can do part of a batch's work before its Write, while the batch before
// it is being written (bucket storage reads the stored state of the
// batch's rows). stages.Chain runs Prepare as the StagePrepare stage between
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
// stages.Chain calls CommitPublish instead of Commit, with the same guarantees as
// Commit, and hands published to stages.ChainConfig.OnCommit: the assembly needs
// it to tell what may be acknowledged to the source and when a group has
// caught up. For a sink without it, every commit counts as published
// (Commit made the batch durable).
type Publisher interface {
	CommitPublish(ctx context.Context, b Batch) (published bool, err error)
}
