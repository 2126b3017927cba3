// Package syncpipe is the module root: it holds this page and the layering
// test, no code. syncpipe replicates PostgreSQL into bucket storage and
// serves it to clients over a PowerSync-compatible sync API; the same
// pipeline framework runs custom pipelines into other sinks.
//
// # One row, from the source to a client
//
// The packages as they are today (issue 42 moves the assembly onto the
// Sink contract; this page follows it):
//
//  1. Read. A snapshot reads a table's primary-key range in chunks:
//     postgres.NewSnapshotReader (sources/postgres), the "read" source of a
//     pipeline.New (pipeline) in replication/snapshot.go. The stream reads
//     the slot: logrepl.Start, whose Stream.Next batches whole transactions
//     (sources/postgres/logrepl); bucket storage reads it through
//     replication's own streamer, other sinks through
//     postgres.NewStreamReader.
//  2. Decode. Column bytes become values (model.Value). A snapshot
//     chunk is decoded as SnapshotReader.Next reads it; the stream has a
//     "decode" stage (postgres.StageDecode): postgres.Decode for other
//     sinks, replication's decoder over postgres.DecodeTuple for bucket
//     storage.
//  3. Evaluate. stages.Eval runs the sync rules (stages/syncrules: Parse,
//     Rules.Bind, BoundTable.NewEvaluator) on each row: the buckets it
//     belongs to and the parameter lookups it feeds.
//  4. Build. stages.Build turns the outputs into model.Change values: one
//     PUT or REMOVE op per bucket with its checksum (stages/checksum: Put,
//     Remove) and the row's replica id.
//  5. Flush. The Flush stage (pipeline.Flush) writes batches to bucket
//     storage (sinks/bucketstore, opened by bucketstore.Open): a snapshot
//     through Store.Sink and sinks.FlushAndCommit, the stream through
//     Store.NewStreamWriter after its "probe" stage
//     (bucketstore.StageProbe, StreamWriter.Prepare). Writers run in
//     parallel; each batch is durable when Write returns.
//  6. Commit. The Commit stage (pipeline.Commit) sees batches in source
//     order only: a snapshot range records its last key, the stream calls
//     StreamWriter.Commit at a transaction's end.
//  7. Checkpoint. That commit publishes a checkpoint (Store.Commit): the
//     op id and LSN up to which every op is stored. Only then is the LSN
//     acknowledged to the slot.
//  8. Sync API. syncapi.New serves POST /sync/stream (Server.Handler). It
//     learns of the checkpoint from Store.WatchCheckpoints, evaluates the
//     client's buckets (Rules.Request), sends bucket checksums
//     (ChecksumCache.Checksums) and the ops (Store.ReadBucketDataShape).
//  9. Client. The client adds up the checksums of the ops it received per
//     bucket (as checksum.Add does) and compares them with the checkpoint's; a
//     mismatch makes it download the bucket again. The real PowerSync
//     client does this in internal/testkit/clienttest.
//
// replication.New (groups, units, leases, the pipelines above) and
// syncapi.New are started by the cli package (cmd/syncpipe). A pipeline
// with another sink (sinks.Open, for example sinks/jsonl) runs steps 1 to
// 6 into that sink under replication.NewSinkRunner.
//
// # Layers
//
// Imports go down this order only, which layering_test.go checks: the data
// model and small helpers; the framework (pipeline); the parts (sources,
// stages, sinks); the assembly (replication, syncapi, config); cli;
// commands and examples. Test harnesses (internal/testkit) and end-to-end
// tests (e2e) may import anything; only tests import them.
package syncpipe
