// Package pipeline is the generic, typed stage framework that syncpipe's
// replication path is built from, and that users import to build their own
// pipelines and sinks. It imports nothing else of syncpipe.
//
// # Model
//
// A Pipeline moves Batches from one Source through any number of stages to
// one Commit:
//
//	From (Source) → Process (N workers) → … → Flush (N writers) → Commit
//
// Stages are goroutines joined by bounded channels (Config.Depth, default
// 2), so every stage works on a different batch at the same time and a slow
// stage holds the faster ones back instead of letting memory grow. A batch is
// large (thousands of rows) and everything the framework does — tracing,
// ordering, commit — is per batch, never per row; the framework allocates
// nothing per row and nothing per batch on its own hot path.
//
// Stages are wired with package functions (From, Process, Flush, Commit)
// because Go methods cannot change type parameters: each returns a typed
// Stream that the next stage consumes exactly once. Wiring mistakes are
// collected and reported by Run, never panicked.
//
// # Who calls what
//
//   - Source.Next is called by one goroutine, once per batch, with the run's
//     hard context. The framework assigns Batch.Seq (0, 1, 2, … without gaps)
//     and checks for a soft stop before every call: that check is the batch
//     boundary at which a pipeline stops or yields.
//   - A ProcessFunc is called by StageConfig.Workers goroutines, each on a
//     different batch. Its output carries the input's Seq and Progress
//     whatever it returns. With several workers, batches leave the stage in
//     completion order unless StageConfig.Ordered is set.
//   - Writer i of a Flush stage is called only by goroutine i, so it may own
//     a connection. Two writers let batch k be written while k+1 is written
//     on the other writer and k+2 is read and evaluated upstream.
//   - The CommitFunc is called by one goroutine, strictly in Seq order.
//   - Side data (Key, Attach, Attached) is state of one batch that is not
//     its payload — what a stage read ahead for it, records its write must
//     store — attached by the source or any stage and travelling with the
//     batch to its writer and its commit, never in a map keyed by Seq.
//
// # Durability and commit
//
// A batch is durable when the Writer that flushed it has returned nil; a
// Writer must not return before the data survives a crash. The Commit stage
// re-sequences batches that arrive out of order (parallel workers, several
// writers) and calls its CommitFunc for batch k only after batches 0…k have
// all left the previous stage, i.e. after all of them are durable. The
// committed progress is therefore never ahead of an unfinished batch, and a
// restart from the last committed progress re-reads at most the batches that
// were in flight.
//
// # Stopping
//
// Run ends in one of these ways; in all of them every goroutine the pipeline
// started has exited when Run returns:
//
//   - End of input: Next returns ErrEndOfInput; in-flight batches finish and
//     commit; Run returns nil.
//   - Soft stop: Pipeline.Stop, or a Scheduler yield request to the unit
//     running the pipeline. No further batch is read; every batch already read
//     flows through all stages and commits; Run returns nil, or an error
//     matching ErrYielded when the scheduler asked. A source blocked inside
//     Next can learn about a soft stop from Draining(ctx).
//   - Hard stop: the context passed to Run is cancelled. Stages see the
//     cancellation, in-flight batches are abandoned, nothing more commits,
//     and Run returns the context's error, wrapped.
//   - Failure: the first stage error (or recovered panic) cancels the run
//     like a hard stop and Run returns it as a *StageError naming the
//     pipeline, stage and batch Seq. Later errors caused by the cancellation
//     are dropped.
//
// # Scheduling
//
// A Scheduler runs Units (one per table range snapshot, or per replication
// stream) with at most SchedulerConfig.Workers at once, most urgent Priority
// first. When more urgent work arrives and every slot is busy, the least
// urgent running unit is asked to yield; a Pipeline running in that unit
// stops at its next batch boundary, commits what it read, and returns
// ErrYielded, and the scheduler re-queues the unit to resume later from its
// committed progress. Stats reports pending and running units for gauges.
//
// # Observability
//
// A StageTracer (pgx style: StageStart returns a context, StageEnd receives
// it) sees every batch of every stage; MultiTracer combines several. The
// context StageStart returned for a batch's source travels with the batch
// (StageInfo.Batch of its later stages), at no cost without a tracer. The
// otelpipeline sub-package turns them into one OpenTelemetry span per stage
// per batch with rows, a batch's spans in one trace. Summary is a tracer
// that totals busy time, share of wall time, rows per busy second and time
// blocked on the next stage (backpressure) per stage, and prints them with
// WriteTable at the end of a run; a metrics backend counts rows and batches
// from StageEnd the same way.
package pipeline
