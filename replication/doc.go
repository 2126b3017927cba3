// Package replication wires a PostgreSQL source to bucket storage: it is the
// assembly where sources/postgres and sinks/bucketstore meet in pipelines
// (they never import each other), run by the pipeline scheduler.
//
// For every replication group (sync rules version) it
//
//  1. checks the source (wal_level, publication, tables, identities),
//  2. creates the group's logical slot if it has none — before any
//     snapshot read, so that the stream later replays every change made
//     while the snapshot ran,
//  3. snapshots every table in key ranges (one scheduler unit per range,
//     resumable from its committed progress), and
//  4. once every table is done, streams from the slot.
//
// Both paths, of bucket storage and of every other sink, end in one chain
// of the exported stages, stages.Chain: stages.Eval → stages.Build →
// flush → ordered commit. A snapshot range feeds it from
// postgres.SnapshotReader; the stream from the one stream reader
// (postgres.StreamReader, with the stored shapes, re-shapes and re-reads
// it asks for: streamer.go, resnapshot.go) through the one decoder
// (postgres.Decode). Bucket storage's sink (bucketstore.Sink) adds what
// its stream needs through the Sink contract's optional interfaces: one
// writer in batch order (sinks.OrderedStream), the probe stage that reads
// the rows' stored state while the batch before is written
// (sinks.Preparer), and a commit that reports the checkpoints it
// publishes (sinks.Publisher), which this package turns into
// acknowledgements, lag and group activation. The table records a stream
// write stores (shapes, re-read progress) travel with their batch as side
// data (bucketstore.StreamTables). This package keeps the assembly:
// groups, units, scheduling, checkpoints, errors.
//
// Pipelines with a sink other than bucket storage run in a SinkRunner
// (sinkpipe.go): a slot of their own, a key-range snapshot into the sink
// and a stream through the same reader and decoder, with the sink keeping
// the progress and storage the pipeline's version — or, for a config
// without storage, a state file per pipeline (sinkstate.go). RunPipelines
// (pipelines.go) starts every configured pipeline; sinkconfig.go opens and
// checks the configured sinks.
//
// # Consistency
//
// Snapshot chunks are read with plain READ COMMITTED statements, not from
// one exported snapshot. A row changed while the snapshot runs may be read
// in either state, but every change after the slot's consistent point is in
// the slot and is applied, in commit order, after the snapshot (stream
// writes are upserts and deletes by replica id, computing REMOVEs from the
// stored previous state), so storage converges to the source. A row deleted
// before its chunk was read is simply not read; one deleted after is
// removed when the stream replays the DELETE — a snapshot read can never
// resurrect it, because the stream starts only after the snapshot finished
// and applies the DELETE last. No checkpoint is published until the stream
// has passed the LSN at which the last chunk was read
// (no_checkpoint_before), so clients never see a half-replayed state.
//
// # Transactions of any size
//
// The stream reads pgoutput protocol version 1: the server decodes a
// transaction only once it has committed (spilling large ones to disk on
// its side, logical_decoding_work_mem) and sends it whole, in commit order.
// logrepl hands a transaction larger than the batch limits over in pieces
// (Batch.Partial), so memory stays bounded by the limits, not by the
// transaction. Each piece is written to storage as it comes, in a storage
// transaction that also records the stream position inside the source
// transaction: its commit LSN and how many of its changes storage now holds
// (groups.stream_txn_lsn, stream_txn_changes). While that is set, storage
// refuses to publish a checkpoint of the group, and the commit LSN is not
// acknowledged to the source, so a client never sees part of a
// transaction. The last piece clears it in the same storage transaction as
// its ops; the next commit publishes the whole transaction at once.
//
// After a crash, pieces already written are reused, not discarded: the
// stream restarts at the end of the last complete transaction, the slot
// delivers the partly stored transaction again from its start — decoding
// is deterministic, the same changes in the same order — and the first
// stream_txn_changes changes are skipped. Nothing is applied twice, so
// every changed row gets exactly one new PUT per bucket, and nothing needs
// undoing (discarding would mean restoring every row's previous state,
// which the pieces replaced). Should the slot ever deliver anything else
// first, the stored part cannot be completed and the group is replaced by a
// re-snapshot, as for a lost slot.
//
// Why not protocol version 2 (streaming 'on', PostgreSQL 14+), which sends
// a large transaction while it is still running? Its pieces arrive before
// the transaction is known to commit, interleaved with other transactions,
// so they could not be written where they belong — a transaction that
// aborts would have to be undone — and would have to be staged and copied
// at commit instead: twice the storage writes on the path whose cost
// decides throughput. What it would save is latency: with version 1 the
// walsender decodes (and spills) the transaction while it runs but sends it
// only from its commit on, and after a restart decodes it again before the
// first change arrives (P3-large: a 1M-row transaction's first piece is in
// storage 2 s after the commit with syncpipe running, 10 s after a
// restart; the rest then streams at the rate of small transactions).
// Version 1 keeps one code path and exact resume.
//
// # Idle positions
//
// The slot reports positions that carry no change for the rules: server
// keepalives (its WAL end), transactions that touched only tables the rules
// do not use, and (PostgreSQL 14) empty transactions. Such a position is
// recorded in storage — a storage commit, after which it may be
// acknowledged — at most every replication.stream.idle_commit_interval, not
// as it comes. The reason is the case where the only WAL is storage's own:
// source and storage are two databases of one cluster (the demo's set-up,
// SPEC §9's, a small production's) and nothing changes on the source.
// Every storage commit writes WAL; the slot's walsender, whose WAL is the
// cluster's, then reports the new WAL end as a position, and recording that
// position writes WAL again. Recorded at once, that loop ran at about a
// thousand storage commits a second with no source change at all. Recorded
// every few seconds, it is one commit per interval: the slot still
// advances (each idle commit is itself the WAL the next position covers),
// so the source retains no WAL for syncpipe, and its confirmed_flush_lsn
// trails by at most an interval plus an acknowledgement tick.
//
// A position that something waits for is recorded at once: a syncpipe
// heartbeat message — the one the sync API emits for a write checkpoint or
// a checkpoint request, whose LSN the next checkpoint must reach, and the
// periodic source.heartbeat_interval one — and a keepalive in which the
// server asks for a reply (a server shutting down waits for its walsenders'
// clients to confirm its WAL end). So is the end of a transaction whose
// earlier piece was written (a TRUNCATE, a shape change): it publishes
// that write. Transactions with nothing for the rules add no replication
// lag while their position waits.
//
// # Schema changes
//
// Storage records, per table, the shape its rows were made from: columns
// (name, type) and replica identity (source_tables.shape). Every relation
// the stream sees is compared with it — not with what this process saw
// since it started — and so, every few seconds
// (replication.stream.schema_check_interval), is the source catalog, since
// a DDL shows in the stream only once a row of its table changes. A table
// whose shape differs is re-shaped at that point of the stream (the catalog
// check waits until the stream has passed the position read after the
// catalog): its new shape is recorded, its stored rows are removed first if
// their replica ids change (another identity), and it is re-read from the
// source in key-ordered chunks between the stream's own batches, through
// the stream's single writer, so the other tables keep streaming and every
// write applies in order (resnapshot.go). The re-read's progress is stored
// with each chunk and resumed after a restart. Until it is done and the
// stream has passed the position of its last read, no checkpoint is
// published: re-read rows may be ahead of the stream. The process never
// exits for a schema change.
//
// # Renamed, moved and re-created tables
//
// The rules name tables by (schema.)name, but what storage's rows of a
// table come from is one relation: storage records its OID
// (source_tables.relation_id). The stream binds a pgoutput relation to a
// rules table by its name or, under any other name, by that OID
// (postgres.StreamReader): a table renamed away, or moved to another schema, is
// followed there and its changes apply as under its own name. Following
// was chosen over re-reading the table when it comes back because the
// slot delivers every change of the relation in order whatever its name,
// so following loses nothing and costs nothing, where a re-read would
// rewrite every row of a large table after a rename that took a second —
// and, done at the wrong point of the stream, could mix states.
//
// Another relation under the rules name (the table dropped and created
// again, or another renamed into its place; its OID differs) holds rows
// storage never saw and lacks the old one's: seen in the stream or by the
// catalog check, the table's stored rows are removed and it is re-read as
// after a schema change, its new OID recorded. A dropped table left a
// publication FOR TABLE, so the new one is added to a publication syncpipe
// created; changes made before that are in the re-read.
//
// While a table the rules name is missing from the source (renamed away,
// moved, dropped), the catalog check stops the group's stream with
// errTableAway: stored and shown with the remedy (status, /healthz,
// syncpipe_replication_failing_units), and rechecked after awayRetry,
// backing off.
// The stream resumes from its stored position once the table is back, so
// the changes made under the other name are delivered then and followed
// by OID, and the stored error clears at its first checkpoint. A rename
// away and back between two catalog checks is only seen by the stream,
// which follows it.
//
// A sink pipeline (SinkRunner) follows a renamed or moved table the same
// way (the same reader), from the OID its tables had when it started. A
// sink can record no table shape nor be re-read into, so a shape change
// or a table re-created under the name re-binds the table with its first
// change in the new shape, without a re-read, and there is no catalog
// check.
//
// # Lost slots, publication events, group replacement
//
// A slot that is dropped or invalidated (wal_status = lost) after the
// snapshot started has lost changes nothing can replay; so has a slot whose
// publication was dropped or stopped publishing a table (changes made
// meanwhile were never decoded). The group is then replaced — for a
// publication, once the publication is usable again; until then the
// problem is stored and reported with the statement that fixes it. A new
// group with the same rules and a new slot snapshots afresh while the old
// one keeps serving its last checkpoint, takes over at its first
// checkpoint, and the old group is retired — slot dropped, storage cleared
// — as is every group a new rules version replaced. What happens to the old
// group follows its state in storage, never this process's memory of it,
// however many replacements one process goes through.
//
// # Several processes
//
// Every process plans every group (planning is idempotent: the first plan
// of a table's key ranges is stored and shared) and queues every unit it
// knows — each snapshot range, each group's stream — in its own scheduler,
// most urgent first. A unit runs only in the process holding its lease
// (storage table leases): a free worker takes the most urgent queued unit
// and tries its lease; when another process holds it, the unit is
// deferred for a heartbeat and the worker tries the next one. A unit
// finished elsewhere is seen finished from storage when this process next
// claims it, so every process's view of a group converges and whichever
// sees the last range done starts the stream — which again only the
// stream lease's holder runs.
//
// The stream unit claims its lease alone and its holder renews it every
// replication.lease.heartbeat (lease.go). Snapshot units are many and
// mostly small, so their leases go in batches (claims.go): one statement
// reads the state of the unit a worker starts and of the next ones queued
// here, and claims it together with the following free units worth about
// one heartbeat of this process's work at its rate so far (at most 320k
// estimated rows; a large range is claimed alone). A process thus never
// sits on much more than a heartbeat of others' work, and the units of a
// process that died do not wait behind the survivors' long queues: with
// a short lease, takeover stays within the lease and a few seconds (P2's
// takeover check). Units it found done
// or held elsewhere are skipped without a statement; one statement per
// heartbeat renews all of a process's snapshot leases; a claimed unit not
// started within a lease duration is left to run out. Every unit gives
// its lease up when it ends unfinished, also on SIGTERM, so another
// process takes it at once; a finished range keeps it until it runs out,
// since nobody claims a done range. Each unit still has its own lease row
// and token, so fencing is the same for both kinds.
//
// A lease names the storage session its holder keeps open for its whole
// life: when a process dies the kernel closes its connections, the
// backend exits, and its leases are free at once. A process that is only
// paused (GC, SIGSTOP, a frozen VM) keeps its session; its leases run out
// after replication.lease.duration, and another process takes them over.
//
// Fencing: the paused process may wake still believing it holds the unit,
// whatever its clock says. So every storage write of a unit carries the
// lease's token (bucketstore.Fence) and checks it as the last statement
// of its own transaction, taking a share lock on the lease row until it
// commits. A write either commits before a takeover — which waits for
// that lock, so the new holder reads progress that includes the write —
// or finds the token changed and rolls back. Tokens only grow (a released
// lease keeps its row and token), so an old token never passes again. The
// slot belongs to the stream lease's holder: a new holder terminates the
// connection still using the slot, and the old holder's stream ends.
// Only a process whose lease storage still shows current may do that
// (Leases.CheckFence, also at every retry of the stream inside the unit):
// a woken process whose stream failed does not cut off the new holder.
// A write in flight when its unit ends (lease lost, a stage failed,
// shutdown) is not cut off but runs to its end, bounded by
// replication.storage_timeout and a few seconds after the unit ended
// (storageCtx): cutting it would only leave the outcome to when the server
// notices the closed connection, and its own fence decides — which is
// what TestPausedStreamHolderIsFencedOut (cli) shows, a paused write
// resuming after a takeover, with its heartbeat held up.
//
// Failure cases:
//   - Storage unreachable for the holder but not for others: the holder
//     cannot renew; after a lease duration without a renewal it stops the
//     unit itself (heartbeat), while others take the lease over once it
//     has expired. Whatever the holder still tries to write is fenced out
//     as soon as it reaches storage again.
//   - Storage restarts: every session ends, so every lease is free; each
//     process's heartbeat renews its own leases with its new session if
//     nobody took them, or its units stop and are claimed again.
//   - Two processes started with different rules files: the one started
//     last decides. Its EnsureGroup stops a PROCESSING group of other
//     rules and creates (or keeps) the group of its own; the other
//     process's units of the stopped group end with ErrGroupStopped. The
//     ACTIVE group keeps serving either way. Give every process the same
//     rules file (one ConfigMap).
//   - A unit's own writes in flight when its lease expires: the takeover
//     waits for them (bounded: the takeover's lock_timeout makes it retry
//     later rather than hang on a session that hangs).
//
// Roles: replication:snapshot never queues a stream; replication:streaming
// never queues a snapshot unit — a group whose snapshot is not done waits,
// polling storage every heartbeat, until a snapshot process has done it.
//
// # Errors
//
// See errors.go: retryable errors back off with jitter; errors that need an
// operator are stored in the group's last_error (syncpipe status, /healthz,
// syncpipe_replication_errors_total) and checked again every 30 s; the
// stored error is cleared once the unit works again.
//
// UPDATEs that leave TOASTed values unchanged are merged with the row's
// previous state kept in storage (see toast.go).
package replication
