package pipeline

import "context"

// Batch is the unit of work that flows through a pipeline. Everything the
// framework does (tracing, ordering, progress commit) happens per batch, never
// per item, so batches should be large (thousands of rows) for the framework's
// cost to vanish next to the real work.
//
// T is the item type of the stage that holds the batch; P is the progress
// token type of the whole pipeline (for example the last primary key of a
// snapshot chunk, or the end LSN of the last transaction in a streaming batch).
type Batch[T, P any] struct {
	// Seq is assigned by the framework when the source emits the batch:
	// 0, 1, 2, … with no gaps within one Run. Stages cannot change it; the
	// ordered commit relies on it being dense.
	Seq uint64
	// Rows is the number of source rows the batch stands for. Stages that
	// expand or filter items usually keep it (see Derive) so that rows/s stays
	// comparable from stage to stage.
	Rows int
	// Bytes is an estimate of the payload size, used only for tracing and
	// metrics.
	Bytes int64
	// Progress is the position the pipeline reaches once this batch and all
	// earlier ones are durable. Set by the source; stages cannot change it.
	Progress P
	// Items is the payload. The framework never looks inside it.
	Items []T

	// trace is the context the tracer's StageStart returned for the
	// batch's source stage (nil without a tracer), handed to its later
	// stages as StageInfo.Batch. The framework sets it on every stage's
	// output, so a stage that builds its output batch itself keeps it.
	trace context.Context
	// side is the batch's side data (Attach, Attached), in attach order;
	// shared between a batch and the batches derived from it, never
	// written in place.
	side []side
}

// Derive builds the output batch of a stage from its input: it keeps Seq,
// Rows, Bytes, Progress and the side data (Attach) and swaps the items. It exists because Go methods
// cannot change a type parameter, and because forgetting to carry Rows over is
// the most common mistake in a hand-written stage.
func Derive[Out, In, P any](in Batch[In, P], items []Out) Batch[Out, P] {
	return Batch[Out, P]{Seq: in.Seq, Rows: in.Rows, Bytes: in.Bytes, Progress: in.Progress, Items: items, side: in.side}
}

// Label is a caller-chosen key/value attached to a pipeline (for example
// table=todos) so that spans, metrics and summaries can tell per-table
// pipelines apart. A slice of labels, not a map, keeps their order stable in
// printed output.
type Label struct {
	Key   string
	Value string
}
