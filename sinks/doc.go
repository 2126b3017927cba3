// Package sinks defines the Sink interface that a pipeline's flush and commit
// stages write to, and the registry that maps the sink type names used in
// YAML pipelines (pipelines[].sink.type) to constructors.
//
// # Writing a sink
//
// A sink is three things to the pipeline framework: a set of flush writers
// (pipeline.Writer), the ordered commit of progress (pipeline.CommitFunc) and
// the lookup of committed progress on restart (Resume). See the Sink
// interface for the exact rules; in short:
//
//   - Who calls what, when. `syncpipe run` opens the sink once per pipeline
//     (Open → your Factory) and runs the pipeline as many runs: one per
//     snapshot key range of each table, then one for the stream, each
//     resumed after a restart. Per run it calls Writer(ctx, i) once for
//     each of flush_writers lanes; lane i's Write is called from one
//     goroutine, a batch at a time, and lanes (and runs) write
//     concurrently, so batch k+1 may be written before batch k. Commit is
//     called from one goroutine per run, strictly in batch order, after the
//     batch and every earlier one of the run were written; commits of
//     different runs arrive concurrently. Resume(table, range) — table ""
//     for the stream — is called before a run starts, to find where it
//     starts. Close is called once, at shutdown.
//   - What must be durable. When Commit returns nil, the batch's changes
//     and its Progress must both survive a crash: Resume must then return
//     that position (or a later one). Write may make the batch durable
//     itself or only stage it for Commit (the jsonl sink encodes in its
//     writers and appends in Commit); either way Commit is the point at
//     which a batch counts as delivered.
//   - What a sink sees after a crash. The source restarts after what
//     Resume returns, so a batch written but not committed is written
//     again — with the same changes when the source is the stream (the
//     slot delivers the same changes in the same order), and with the
//     rows as they are now when it is a snapshot range.
//   - How to be exactly once. Either make Commit atomic with the data (the
//     changes and the position in one transaction, as bucket storage does;
//     or the jsonl sink's file sizes recorded with the position, cutting
//     anything past them at Open), or make writes idempotent: upserts keyed
//     by Change.Key for rows, and for streamed changes the source position
//     every Change carries (TxnLSN, TxnIndex), which is the same when the
//     change is delivered again.
//   - Changing a pipeline. A changed sync rules file, table list or sink
//     setting starts a new pipeline version that snapshots afresh; a sink
//     implementing Resetter is reset first, any other must be cleared by
//     the operator (run refuses to mix versions).
//
// # Making a sink usable from YAML
//
// Register a Factory under a name with the Spec of its settings (name,
// type, default, required, doc), usually in an init function so that a
// blank import enables the sink:
//
//	var spec = sinks.Spec{Summary: "posts each batch to an HTTP endpoint", Fields: []sinks.Field{
//		{Name: "endpoint", Type: sinks.FieldString, Required: true, Doc: "URL to POST to."},
//		{Name: "timeout", Type: sinks.FieldDuration, Default: 10 * time.Second, Doc: "Bound of one POST."},
//	}}
//
//	func init() { sinks.MustRegister("mysink", spec, newMySink) }
//
// A config can then name it:
//
//	pipelines:
//	  - name: audit
//	    sink: {type: mysink, settings: {endpoint: "https://…"}}
//
// A program that registers its sinks and then calls cli.Main (package
// github.com/syncpipe/syncpipe/cli) is the whole syncpipe command with
// those sinks; one that calls replication.RunPipelines runs just its
// configured pipelines (examples/httpsink). Either way the config is
// checked against the registered names and every pipeline's settings
// against its sink's spec, offline and with file positions
// (replication.CheckSinks), and each pipeline's sink is built with Open,
// whose factory gets the checked Settings. This package knows sink types
// and settings, not config files: Open takes a type name and its raw
// settings (Config), CheckSettings checks them alone. FlushAndCommit ends
// a pipeline of your own at a sink.
//
// # No storage database needed
//
// A pipeline's sink keeps its progress (Commit, Resume). What the runner
// keeps besides — the pipeline's version and fingerprint, its replication
// slot, the snapshot's key range plan, the last stream position for
// status, and the last error that needs an operator — lives in bucket
// storage only when the config has a storage section (or a bucketstore
// pipeline). A config whose pipelines all write to other sinks needs no
// storage: it sets state_dir instead, and each pipeline's metadata is a
// state file there, {state_dir}/{pipeline name}.state.json, replaced
// atomically on each change. Keep state_dir next to the sinks' progress:
// together they are the pipeline's whole state, to back up or delete
// together, and one process uses them at a time. `syncpipe status`
// reads the state files; the sink is never opened for it.
//
// # The chain every pipeline runs
//
// `syncpipe run` runs every pipeline, bucket storage included, through
// stages.Chain: decoded row changes → stages.Eval → stages.Build → flush →
// ordered commit, for each snapshot range and for the stream. A sink asks
// for more through small optional interfaces that stages.Chain finds by type
// assertion:
//
//   - OrderedStream: the stream's changes must apply in order (a later
//     change of a row overwrites an earlier one, the sink reads what it
//     wrote). The stream then gets one writer, StreamWriter's, which sees
//     the batches in Seq order, one at a time; flush_writers still sizes
//     the snapshot.
//   - Preparer, on that writer: Prepare runs as a stage of its own
//     (StagePrepare, "probe"), so the work it does for batch k+1 (bucket
//     storage reads the stored state of its rows) overlaps the Write of
//     batch k. What it prepared travels with the batch as side data
//     (pipeline.Attach), to exactly that batch's Write.
//   - Publisher: a commit that publishes checkpoints reports whether it
//     did, for the assembly's source acknowledgements and lag.
//
// Bucket storage (sinks/bucketstore) implements all three; a custom sink
// can too, and then runs as the built-in one does.
//
// # Keeping progress in a file
//
// A sink whose data goes where no position can be stored with it (an HTTP
// endpoint, a queue) keeps its committed progress with FileProgress and
// needs no progress code of its own: FileProgress has the Commit, Resume
// and Close of the Sink interface, so a sink that embeds one only writes
// Writer and its writers' Write. Each commit replaces the file atomically,
// and commits of concurrent runs are serialised. Such a sink delivers at
// least once — a batch delivered but not yet committed when the process
// dies is delivered again — so its receiver makes writes idempotent as
// above: upserts by Change.Key, and streamed changes recognised by
// (Change.Key, TxnLSN, TxnIndex). It is no Resetter: a changed pipeline
// waits for the operator to clear the receiver and the progress file.
package sinks
