// Package bucketstore is the PostgreSQL bucket storage sink: the write side
// of replication (groups, source tables, current rows, bucket ops, parameter
// lookups, checkpoints) and the read side the sync API serves from.
//
// # Roles
//
// Storage is split by role, each with its own type, so that a consumer
// names the role it needs and declares the few methods it calls as an
// interface where it uses them (replication/storage.go,
// syncapi/storage.go, cli/status.go):
//
//   - schema: Open creates and migrates the schema (schema.go) and returns
//     the Store, which owns the pool (Close) and hands out the other roles;
//   - write: Writes — the Sink of a group, writers, StreamResume,
//     RowData, Commit and the storage counters (sink.go, writer.go,
//     stream.go, rowdata.go, checkpoint.go, stats.go);
//   - catalog: Catalog — groups, source tables, snapshot ranges, sink
//     pipeline records (groups.go, tables.go, ranges.go, sinkpipelines.go);
//   - read: Reader — bucket data, parameter rows, checksums, change records,
//     checkpoints and write checkpoints, what the sync API serves (read.go,
//     params.go, checksums.go, watch.go, writecheckpoint.go);
//   - coordination: Leases — leases, unit claims, fencing and the storage
//     run (leases.go, leasebatch.go, incarnation.go);
//   - maintenance: Compactor — compaction, clearing, sizes (compact.go,
//     clear.go, groupbytes.go).
//
// The roles are types in this one package, not sub-packages: they share
// the pool, the SQL helpers (retry, durably, acquire) and the schema's
// invariants, and a Compactor's rewrite and a Reader's floor check are two
// halves of one protocol (compact.go). Each embeds the shared db (pool,
// schema, logger, counters, storage run), so a role value costs nothing
// and all of them see one pool. Writes also holds the write path's own
// state: encode buffers kept from batch to batch and the change records'
// pruning horizon.
//
// # Schema
//
// Everything lives in one schema (default "syncpipe"), created and migrated
// by Open (see schema.go; versions are applied once, under an advisory lock,
// so many processes may start at once). One sequence, op_id_seq, numbers
// every op and every parameter entry of every group.
//
//   - groups: one row per deployed sync rules version, PROCESSING → ACTIVE →
//     STOP (→ TERMINATED while being cleared), with its slot name, last
//     checkpoint (op id + source LSN), no_checkpoint_before and last error.
//   - source_tables / snapshot_ranges: replicated tables per group and their
//     snapshot progress per key range.
//   - current_data: per source row, the buckets it is in (bucket, object
//     type, object id), the parameter lookups it produces, and its data
//     where a later UPDATE may omit unchanged TOAST values.
//   - bucket_data: the ops, PRIMARY KEY (group_id, bucket_name, op_id) so a
//     bucket is read as one index range.
//   - bucket_parameters: lookup entries versioned by op id.
//   - bucket_changes: per write transaction, the buckets and parameter
//     lookups it touched and its op id range (changerecords.go), so readers
//     can tell what changed between two checkpoints without scanning ops.
//   - op_reservations, write_checkpoints, leases.
//
// # Write path
//
// A Writer owns one connection and writes one batch per transaction. Rows
// travel as a hand-encoded binary COPY stream (copyenc.go): no per-row
// statements, no JSON recordsets, no boxing of values. The number of storage
// rows per source row decides throughput, so a snapshot row costs exactly one
// current_data row plus its ops.
//
// Snapshot batches (WriteSnapshot) are insert-only. Whether a row already
// exists — a chunk written by a run that crashed before committing its
// progress — is decided by current_data's primary key at write time, never
// by a lookup: the batch is COPYed straight in; if, and only if, the key
// reports a conflict, the transaction rolls back to a savepoint and the same
// bytes go through a staging table and one INSERT … SELECT … ON CONFLICT DO
// NOTHING RETURNING, and only the rows it returns get ops. So the common
// case runs at COPY speed and the resume boundary is still exact.
//
// Stream batches (WriteChanges) of a group are serialized by one
// transaction-level advisory lock per group, not by row locks (which would
// write WAL for every row, and the source's walsender reads storage's WAL
// too when both share a cluster). Under it they read the previous state of
// their rows with one primary key probe per row, write a PUT
// per bucket a row is in now, a REMOVE per bucket it left, retract lookups
// it no longer produces with an empty entry, and replace current_data rows
// whose buckets, lookups or row data changed (most updates change only the
// data of their ops and leave the current row untouched).
// Serialization failures and deadlocks roll the whole transaction back and
// are retried with backoff; committed work is never redone.
//
// Error state (last_error) is written with plain autocommit statements,
// never inside a write transaction, so reporting errors cannot make
// concurrent writers conflict.
//
// # The checkpoint invariant
//
// A checkpoint C promises that every op with op_id ≤ C is committed. With
// several writers — the pipelined flush writers of a snapshot unit, snapshot
// writers of other processes — op ids are drawn from the sequence by one
// transaction and committed in another order, so "the sequence's last value"
// is not a safe checkpoint. Each write is therefore bracketed by a claim:
//
//  1. Before allocating ids, the writer inserts, in autocommit, a row in
//     op_reservations with low = the sequence's next value. Every id it
//     will draw is ≥ low, because the sequence only grows.
//  2. It draws its ids and writes its ops in its transaction, and deletes
//     its claim in that same transaction: the claim disappears atomically
//     with the ops becoming visible.
//  3. Commit (checkpoint.go) locks the group row, then reads the lowest live
//     claim L. It publishes C only if C < L; otherwise it parks C in
//     keepalive_op for the next commit.
//
// Why this is sufficient: suppose a writer W holds an uncommitted id x ≤ C.
// C is made of ids that committed before Commit ran, and x was drawn before
// the largest of them (x is smaller and the sequence is monotonic), so W's
// claim, committed before W drew x, was committed before Commit's statement
// began and is visible to it, with low ≤ x ≤ C: Commit refuses. Claims carry
// their backend pid and start time; a claim whose connection is gone is
// ignored (its transaction rolled back, so it can commit nothing) and
// deleted. TestCheckpointNeverAheadOfUncommittedOps checks the invariant
// with 4 writers and random commit delays; with the claim check disabled it
// fails within a few hundred iterations.
//
// A group publishes no checkpoint before its snapshot is done for every
// table and the source position has passed no_checkpoint_before; the first
// checkpoint of a PROCESSING group activates it and stops the previous one.
// Checkpoints are announced with pg_notify on NotifyChannel. Writers may
// commit with synchronous_commit=off, but the transaction that publishes a
// checkpoint waits for its WAL flush, which covers every earlier commit:
// a storage crash can lose ops no checkpoint covers yet (the stream writes
// them again from the last acknowledged source position), never ops a
// client has downloaded. Marks a process acts on once committed (a range,
// a table or a snapshot done, a range plan) commit with
// synchronous_commit=on whatever the setting. A snapshot range's progress,
// though, is an unflushed commit like its ops, so a crash can take back
// both, while the process that read them carries on from where it was:
// work reads Epoch, a count of the storage server runs the pool has
// connected to, before it reads its progress, and its writes (Fence.Epoch)
// fail with ErrStorageRestarted on a later run, so it resumes from what
// storage holds after recovery.
//
// # Clearing
//
// Clear and Terminate delete a group's rows in bounded batches (a TID scan
// over at most BatchSize ctids per statement, each its own transaction), so
// clearing millions of ops never holds one giant transaction; they can be
// interrupted and resumed.
package bucketstore
