package pipeline

import "context"

// Source produces the batches of a pipeline. The framework calls Next from a
// single goroutine, one call at a time, so a source needs no locking.
//
// Next receives the run's hard context: it is cancelled only when the whole
// run aborts (error or hard stop), never by a soft stop, so a source's I/O (a
// cursor fetch, a replication receive) is not torn down half-way by a drain.
// The framework checks for a soft stop before every call to Next; a source
// that may block for long between batches should also select on
// Draining(ctx) and return ErrEndOfInput when it fires; the run then counts
// as stopped, not finished, so a yielded unit is re-queued.
//
// Next returns ErrEndOfInput (possibly wrapped) when there is nothing more to
// read; any batch returned together with an error is discarded. The Seq of
// the returned batch is ignored and assigned by the framework. An empty batch
// is legal and useful: it carries progress (for example an idle LSN advance)
// through to the commit.
type Source[T, P any] interface {
	Next(ctx context.Context) (Batch[T, P], error)
}

// SourceFunc adapts a function to a Source.
type SourceFunc[T, P any] func(ctx context.Context) (Batch[T, P], error)

// Next calls f.
func (f SourceFunc[T, P]) Next(ctx context.Context) (Batch[T, P], error) { return f(ctx) }

// ProcessFunc transforms one batch. It may be called from several goroutines
// at once (StageConfig.Workers) and must then be safe for concurrent use.
// The Seq and Progress of the returned batch are overwritten with the input's,
// so a stage can never break ordering or progress; Rows and Bytes are taken
// as returned (use Derive to carry them over), and a returned batch without
// side data gets the input's (see Attach). Every input batch must yield
// exactly one output batch, possibly empty: dropping a batch would stall the
// ordered commit forever, which is why there is no filter-out-batch result.
// The input's Items may be reused by the stage once it has returned.
type ProcessFunc[In, Out, P any] func(ctx context.Context, b Batch[In, P]) (Batch[Out, P], error)

// Writer is one flush lane of a Flush stage, typically owning one storage
// connection. Write must return only once the batch is durable: the framework
// treats a nil return as "this batch survives a crash" and may commit its
// progress as soon as all earlier batches are durable too. A Writer is only
// ever used by one goroutine at a time, so it may hold unsynchronised state.
type Writer[T, P any] interface {
	Write(ctx context.Context, b Batch[T, P]) error
}

// WriterFunc adapts a function to a Writer.
type WriterFunc[T, P any] func(ctx context.Context, b Batch[T, P]) error

// Write calls f.
func (f WriterFunc[T, P]) Write(ctx context.Context, b Batch[T, P]) error { return f(ctx, b) }

// CommitFunc persists the progress of a batch. The framework calls it from a
// single goroutine, strictly in Seq order, and only after the batch and every
// earlier batch have passed all previous stages (in particular their Flush).
// After it returns, the framework holds no reference to the batch, so its
// Items may be recycled here.
type CommitFunc[T, P any] func(ctx context.Context, b Batch[T, P]) error

// StageConfig names and sizes one stage. The zero value (except Name) is a
// sensible default: one worker, pipeline default channel depth, unordered.
type StageConfig struct {
	// Name identifies the stage in errors, spans and summaries. Required.
	Name string
	// Workers is the number of goroutines running a Process stage (default 1).
	// Ignored by From, Flush (one goroutine per writer) and Commit (always one).
	Workers int
	// Depth is the capacity of the stage's output channel; 0 uses
	// Config.Depth. Deeper channels absorb jitter at the price of memory.
	Depth int
	// Ordered makes a multi-worker Process or Flush stage emit batches in Seq
	// order. Needed only when the next stage cares about order (the commit
	// stage restores order by itself).
	Ordered bool
}

// StageKind tells tracers what role a stage plays; a source has no input
// batch, for example, so its row count is the size of what it produced.
type StageKind uint8

// Stage kinds, in the order they appear in a pipeline.
const (
	KindSource StageKind = iota
	KindProcess
	KindFlush
	KindCommit
)

// String returns the lower-case name of the kind, as used in printed output.
func (k StageKind) String() string {
	switch k {
	case KindSource:
		return "source"
	case KindProcess:
		return "process"
	case KindFlush:
		return "flush"
	case KindCommit:
		return "commit"
	}
	return "unknown"
}
