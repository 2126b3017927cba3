package sinks

import (
	"context"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
)

// Position is where a batch leaves off in its source: the progress token of
// every replication pipeline (pipeline.Batch[model.Change, Position]). The
// source sets it on each batch; the sink stores it in Commit and hands it
// back from Resume, and the source restarts right after it. A position is
// either a snapshot position (Table set) or a stream position (Table empty).
type Position struct {
	// Table is the snapshotted table as "schema.name"; empty for a stream
	// position.
	Table string
	// Range numbers the primary key range of Table that the snapshot chunk
	// belongs to; ranges of one table are snapshotted independently, so
	// each has its own progress.
	Range int
	// LastKey is the last primary key read in the range, as the text forms
	// of the key columns in key order; the next chunk starts after it.
	LastKey []string
	// RowsDone counts the rows of the range read so far, for progress
	// reporting (percent, ETA) after a restart.
	RowsDone int64
	// Done is set on the range's last batch: a restart skips the range.
	Done bool
	// LSN is, for a stream position, the end LSN of the last complete source
	// transaction in the batch; the stream resumes from there (and may
	// confirm it to the replication slot once it is committed).
	LSN uint64
	// TxnLSN and TxnChanges are set when a stream batch ends inside a
	// source transaction too large for one batch: the transaction's commit
	// LSN and how many of its changes the sink holds so far. The source
	// delivers the transaction again from its start after a restart and
	// skips that many changes, so none is lost or applied twice.
	TxnLSN     uint64
	TxnChanges int64
}

// IsStream reports whether p is a stream position rather than a snapshot
// one.
func (p Position) IsStream() bool { return p.Table == "" }

// Batch is what a sink's writers and its Commit receive.
type Batch = pipeline.Batch[model.Change, Position]

// Writer is one flush lane of a sink, as returned by Sink.Writer.
type Writer = pipeline.Writer[model.Change, Position]

// Sink receives a pipeline's evaluated row changes and keeps its progress.
//
// One Sink serves one configured pipeline (one pipelines[] entry) for its
// whole life, and that pipeline is run as many pipeline.Pipeline runs: one
// per snapshot range of each table and one for the replication stream,
// several at the same time, each resumed and re-run after a yield or a
// restart. Everything below is per run unless said otherwise; methods of a
// Sink itself may be called concurrently from different runs.
type Sink interface {
	// Writer returns writer i (0 ≤ i < flush_writers) of a new run. It is
	// called once per writer per run, before the run starts, so it should
	// be cheap. The flush stage calls Write of writer i only from its
	// goroutine i, one batch at a time, so a writer may keep unsynchronised
	// state (buffers, a prepared statement); writers of one run, and of
	// different runs, write at the same time, and with several writers
	// batch k+1 may be written before batch k.
	//
	// Write must return nil only once the batch is durable (survives a
	// crash) or staged so that Commit makes it durable together with its
	// position: the pipeline commits the batch's position as soon as Write
	// returned for it and every earlier batch. Items and their byte slices
	// belong to the pipeline again when Write returns, so a writer must
	// copy (or encode) what it keeps.
	//
	// Writers have no Close: a writer needing a connection for longer than
	// one Write takes it from a pool that the sink owns and releases in
	// Close. ctx bounds the creation of the writer only.
	Writer(ctx context.Context, i int) (Writer, error)

	// Commit records b.Progress durably as committed progress, together
	// with the batch's changes if Write only staged them. The
	// pipeline calls it from one goroutine per run, strictly in batch (Seq)
	// order, and only after that batch and every earlier batch of the run
	// are durable; once a run fails or is hard-stopped, no further batch of
	// it is committed. Once Commit returns nil, Resume must return
	// b.Progress (or a later committed position) even after a crash.
	// Commits of different runs (for example two snapshot ranges and the
	// stream) arrive concurrently. b.Items may be empty: a batch may carry
	// only progress, such as an idle LSN advance.
	Commit(ctx context.Context, b Batch) error

	// Resume returns the last committed position of snapshot range rangeNo
	// of table ("schema.name") or, when table is "", of the stream; ok is
	// false when nothing was committed for it yet. The caller starts a run
	// after this position, so Resume sees only committed progress, never a
	// batch that was merely written.
	Resume(ctx context.Context, table string, rangeNo int) (pos Position, ok bool, err error)

	// Close releases the sink's resources once no run uses it any more;
	// writers must not be used afterwards. Close is called once.
	Close(ctx context.Context) error
}

// Resetter is implemented by sinks that can start over: Reset discards
// everything the sink holds for its pipeline — written data and committed
// progress — so that a new pipeline version (changed sync rules, tables or
// sink settings) snapshots into an empty sink instead of mixing versions.
// It is called before any run of the new version; a sink may keep the old
// data aside rather than delete it. A sink without Reset must be cleared
// by the operator when its pipeline changes.
type Resetter interface {
	Reset(ctx context.Context) error
}
