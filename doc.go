// Package syncpipe is the module root: it holds this page and the layering
// test, no code. syncpipe replicates PostgreSQL into bucket storage and
// serves it to clients over a PowerSync-compatible sync API; the same
// pipeline framework runs custom pipelines into other sinks.
//
// # One row, from the source to a client
//
//  1. Read. A snapshot reads a table's primary-key range in chunks:
//     postgres.NewSnapshotReader (sources/postgres), the "read" source of a
//     pipeline.New (pipeline) in replication/snapshot.go. The stream reads
//     the slot: logrepl.Start, whose Stream.Next batches whole transactions
//     (sources/postgres/logrepl), and postgres.NewStreamReader turns them
//     into batches bound to their tables (following renames by OID,
//     resuming inside a large transaction) — one reader for bucket storage
//     and every other sink.
//  2. Decode. Column bytes become values (model.Value). A snapshot chunk
//     is decoded as SnapshotReader.Next reads it; the stream has a
//     "decode" stage, postgres.Decode, which also merges unchanged TOAST
//     values from the row's previous state.
//  3. Evaluate. stages.Eval runs the sync rules (stages/syncrules: Parse,
//     Rules.Bind, BoundTable.NewEvaluator) on each row: the buckets it
//     belongs to and the parameter lookups it feeds.
//  4. Build. stages.Build turns the outputs into model.Change values: one
//     PUT or REMOVE op per bucket with its checksum (stages/checksum) and
//     the row's replica id.
//  5. Flush. stages.Chain wires steps 3 to 6 for every pipeline, snapshot
//     and stream alike. Its flush stage (pipeline.Flush) writes batches to
//     the sink — bucket storage (sinks/bucketstore, opened by
//     bucketstore.Open) through its write role's Sink (Store.Writes) —
//     with flush_writers writers; a stream of bucket storage gets one
//     writer in batch order (sinks.OrderedStream) and, before it, the
//     "probe" stage (sinks.Preparer) that reads the rows' stored state
//     while the batch before is written (a large batch in slices on
//     several connections at once). Each batch is durable when Write
//     returns.
//  6. Commit. The commit stage (pipeline.Commit) sees batches in source
//     order only: a snapshot range records its last key; a stream batch
//     that ends a source transaction publishes a checkpoint
//     (sinks.Publisher).
//  7. Checkpoint. The checkpoint is the op id and LSN up to which every op
//     is stored. Only then is the LSN acknowledged to the slot
//     (replication/stream.go).
//  8. Sync API. syncapi.New serves POST /sync/stream (Server.Handler). It
//     learns of the checkpoint from the Reader's WatchCheckpoints,
//     evaluates the client's buckets (Rules.Request), sends bucket
//     checksums (ChecksumCache.Checksums) and the ops
//     (Reader.ReadBucketDataShape).
//  9. Client. The client adds up the checksums of the ops it received per
//     bucket and compares them with the checkpoint's; a mismatch makes it
//     download the bucket again. The real PowerSync client does this in
//     internal/testkit/clienttest.
//
// replication.RunPipelines starts every configured pipeline: the bucket
// storage one under replication.New (groups, units, leases), every other
// one under replication.NewSinkRunner, both through steps 1 to 6 above.
// cli (cmd/syncpipe) starts it and syncapi.New; examples/httpsink starts
// only RunPipelines, with no storage database.
//
// # Layers
//
// Imports go down this order only, which layering_test.go checks: the data
// model and small helpers; the framework (pipeline); the parts (sources,
// stages, sinks); the assembly (replication, syncapi, config); cli;
// commands and examples. Test harnesses (internal/testkit) and end-to-end
// tests (e2e) may import anything; only tests import them.
package syncpipe
