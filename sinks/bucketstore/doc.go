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
//   - current_data2, bucket_data2, bucket_names: the same, in storage
//     version 2 (see "Storage versions"); version 3 keeps its current
//     rows in current_data3 instead of current_data2; bucket_ops shows every group's
//     ops with bucket names and table ids, in either version, for people
//     and test tools.
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
// A stream's probe mostly runs before its transaction, while the batch
// before is written (StreamWriter.Prepare; rows that write changed are
// read again inside the transaction), and a batch of 512 rows or more is
// read in up to four slices at once, each on a connection of its own
// (readSlices). Why: PostgreSQL 15 reads a page it does not hold with one
// synchronous read, so a single probe statement waits for its misses one
// after another. Once the current rows outgrow shared_buffers — at 10M
// todos their key and heap are 1.4 GB against 1 GB — a 1k-row
// transaction's probe spent 35 µs a row waiting (pg_stat_statements,
// scale benchmark) against 8 µs with every page held; slices overlap the
// waits (and with every page held they use a second core). Slices are
// contiguous in the batch's key order, so each walks its own part of the
// key; they take at most half the storage pool.
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
// # Storage versions
//
// groups.storage_version names the layout of a group's ops and current
// rows. Everything that differs between versions is one layout value per
// version (layout.go): the SQL of every statement that touches those
// tables, whether the bucket and table columns hold names or interned
// ids, and whether current rows carry a key order. The logic — snapshot
// and stream writes, reads, checksums, compaction, Clear — is one for all
// and runs its group's layout's statements; a group's version never
// changes, so it is read once per process (db.layout).
//
// Version 1 (groups created before version 2 existed) keeps the shared
// bucket_data and current_data, keyed by bucket name and table id text.
// Such groups keep working in full; they move to the current version (as
// version 2's groups do) through a new
// group that snapshots afresh in the background, as for a rules change:
// EnsureGroup, finding the ACTIVE group of the configured rules older
// than CurrentStorageVersion, creates a PROCESSING group of the same rules
// in the current version (under its advisory lock, so processes starting
// at once agree on one), and the process that creates it logs the move
// once. The old group streams and serves until the new one's first
// checkpoint takes over (Commit stops it), and is then retired like any
// replaced group: its slot dropped and its rows deleted in batches by its
// own (v1) statements. A PROCESSING group of an older version (a rules
// change the previous version had begun) serves nobody and is stopped: a
// new group of the current version replaces it, rather than one that
// would have to move again. Why a re-snapshot and not a copy: the source
// is the truth, a snapshot is the path every group already takes and is
// tested at every size, and a copy would have to translate every op's
// bucket and table in SQL while the old group's stream writes; the
// source's cost is one snapshot, the same as a rules change.
//
// Version 2 is built for bytes per row,
// the primary keys' page fill and a cheap group lifecycle (measured at
// 1M todos, version 1 took 918 bytes per source row):
//
//   - A partition per group of bucket_data2 and current_data2 (LIST on
//     group_id), created in the transaction that creates the group. Their
//     primary keys leave out group_id, one value per partition: (bucket,
//     op_id), 16 bytes of key, and (source_table, source_key). Clear
//     empties them with TRUNCATE, at once, instead of deleting rows in
//     batches that vacuum must then reclaim, and retiring a group
//     (Terminate) drops them (see "Clearing"). Statements address the
//     parents with group_id = $1, which the planner prunes to the one
//     partition.
//   - Bucket names are interned per group in bucket_names (name → id from
//     bucket_id_seq). Ops, the primary key and current rows carry the
//     8-byte id instead of a name of about 50 bytes. A writer interns its
//     batch's new names before its transaction, in one statement of their
//     own (names sorted: concurrent writers wait for each other instead of
//     deadlocking; a name whose write then fails is harmless, no op
//     carries it). Readers look names up and never intern: a name without
//     an id is an empty bucket (noBucket: no rows, checksum 0). Every role
//     shares one bounded LRU per store both ways (names.go); an id never
//     changes in its group, so nothing is ever stale. bucket_names is one
//     plain table, not partitioned: a group has a name per bucket, not per
//     op, and the names outlive Clear (every process's cache holds the
//     ids, so a cleared group written again must get the same ones).
//     Terminate deletes them: a terminated group is never read or written
//     again, and the caches are keyed by group, whose ids come from a
//     sequence (groups.id is serial), so no later group is handed a
//     retired group's ids; its entries leave the LRU as it evicts them.
//   - Tables are numbered (source_tables.num, an int from a sequence): ops
//     and current rows carry 4 bytes instead of the 24-character id. The id
//     stays the table's public identity (REMOVE subkeys); readers map the
//     number back through a per-group cache.
//   - bucket_data2's fixed-width columns come first, int8s then int4s, so
//     they need no padding; op, the one int2, comes last, after data: before
//     it, it would leave 2 bytes of padding in front of data's 4-byte
//     aligned length word (a todos op is then 320 bytes instead of 321,
//     25 rows a page instead of 24). The checksum is an int4 holding the
//     32-bit value's bits (readers take the low 32 bits of it, or of a
//     sum, which PostgreSQL computes in int8).
//   - An op's object id, when it is a canonical UUID (lowercase,
//     hyphenated: the only form that formats back to the same text), is
//     its 16 bytes in object_uuid, else text in object_id; its object
//     type is NULL when it is the name of the op's table (the rules'
//     output table most often is). Readers put both back: the id with
//     uuid's text output, the type from the table's number.
//   - current_data2.buckets is one bytea (members.go): the count, the
//     bucket ids as varints, then the object type and id once when every
//     membership shares them (the common case), else per membership, the
//     type left out when it is the table's name and a UUID id as 16
//     bytes. The object type and id must stay: a REMOVE names the object
//     the row left, and they can differ from bucket to bucket (the rules'
//     output table name and id column).
//   - bucket_parameters, bucket_changes (named by bucket names, as readers
//     ask by name), op_reservations and the rest stay shared, as in
//     version 1.
//
// Measured right after the demo's snapshot of 1M todos (1,001,000 source
// rows, bytes per source row, version 1 → version 2): bucket_data heap
// 455 → 372 and primary key 169 → 36 (a key of 16 bytes instead of about
// 70: 28 bytes an entry, so about 78 % leaf fill where version 1 had
// about 50 %);
// current_data heap 205 → 134 and primary key 89 → 53; all of storage
// 918 → 597 (−35 %). Then, with the SPEC's todos rules (scale benchmark,
// 596 at the start): packed memberships took current_data's heap
// 135 → 85; UUID object ids as 16 bytes the ops' heap 373 → 342 (516
// in all); leaving out an object type that is the table's name, 85 → 77
// (507). The int4 checksum and the ops' NULL object type took a todos op
// from 329 to 321 bytes, which changed nothing alone (still 24 rows a
// page); op after data took it to 320, 25 rows a page: 342 → 328, 493
// in all (−17 % from 596, −41 % from version 1's 840 of issue 47). Inline lz4 compression of data (toast_tuple_target = 128) saved
// nothing: PostgreSQL only compresses a tuple inline once it is over
// TOAST_TUPLE_THRESHOLD (about 2 kB), which ops of rows like these never
// are. What is left is mostly the ops' row data (the JSON of every op)
// and current_data's primary key, whose random inserts (keys are UUIDv5)
// leave its leaves about 70 % full.
//
// Version 3 (every group CreateGroup makes now) is version 2 with its
// current rows in partitions of current_data3, keyed by (source_table,
// key_order, source_key). Why: source_key is the replica id, a UUIDv5, so a
// snapshot, which reads each table in primary key chunks, inserted its
// rows into random leaves of that key. At 10M todos the key (527 MB,
// about 68 % leaf fill) outgrew shared_buffers: every insert a random
// read and a dirty random page, and after every checkpoint a full-page
// image in WAL for each leaf touched again — WAL that, on one cluster, the
// stream then decodes before its first checkpoint. key_order is an int4,
// an order-preserving prefix of the row's first replica identity column
// (stages.KeyOrderOf: an integer key exact below 2^26 and in order over
// all of int64, a text or bytea key its first 4 bytes, a float its top
// 32 bits, anything else 0), computed in op build with the replica id
// (model.Change.KeyOrder) and by the stream decoder for its row data
// reads (RowRef.KeyOrder). Rows read in the source's key order get
// ascending storage keys, so the snapshot appends to the key, and a
// stream batch's probes (collapse sorts by table, key order, key) walk
// it in order. The replica id stays the identity (subkeys, checksums and
// REMOVEs are PowerSync's): key_order only orders, so a key whose type
// gives little or no locality (a uuid key is text: 16 bits, about 150
// rows to a value at 10M, which share a leaf or two; another collation
// than C; 0 for other types) costs locality, never correctness. Every
// current row statement of v3 names key_order (the COPY's columns, the
// probes' index condition, truncate's paging); the other statements are
// version 2's. Migration 12 creates current_data3, a parent of its own
// whose fixed-width columns come first (group_id, source_table,
// key_order: three int4s, then the 16-byte uuid, 28 bytes with no pad)
// and the varlenas after them, with key_order NOT NULL; version 2's
// partitions keep current_data2 as it was, their key and statements;
// their groups move to version 3 as version 1's do, through a
// re-snapshot.
// Measured (scale benchmark, 2M todos, three runs against the previous
// commit's build in the same run, on a machine other tests shared): P1 on
// one cluster 1.21×, 1.03× and 1.17× the previous rate (quietest run:
// 186.6k rows/s against 153.7k, the snapshot itself 225k against 180k),
// Postgres CPU per source row 26, 29 and 24 % less (6.4 µs against 8.6);
// on two clusters P1 within the noise (1.08×, 0.67×, 0.89×). At 2M the key
// (105 MB) still fits in shared_buffers, so what shows is less work per
// row, not yet the random reads it saves at 10M. Its
// cost: 4 more bytes per current row, which a heap tuple's padding to 8
// bytes makes 0 or 8 by the row's length, whatever the column order: the
// column added after the varlenas (as first built, in current_data2)
// needs at most 3 bytes of padding before it, and that padding is always
// within the 8-byte round-up that follows (measured on 200k snapshot rows
// of the test rules: 72.42 heap bytes per row in current_data3 and in a
// copy with key_order last, 68.28 in version 2). At 2M todos: storage 503
// bytes per source row against 492, current_data2's heap 169 MB against
// 153 and its key 113 MB against 105 (the same 32-byte entries; leaves
// about 62 % full against 66 %).
//
// Version 3 also packs a current row's memberships more tightly
// (layout.compactMembers; the format in members.go): one header byte holds
// the count (below 63) and a mode, and the commonest object — the table's
// name as type and a UUID id, shared by every membership — is then its
// 16 bytes and nothing else. Version 2 spends a byte on the count, one on
// shared or each, and two on the object's type and id tags, so a todo's
// memberships (one bucket id of two bytes) take 19 bytes instead of 22;
// with current_data3's 52 bytes of tuple header and fixed-width columns
// and a 1-byte varlena header the tuple is 72 bytes instead of 75, which
// alignment made 80: 8 bytes a row for most rows. No other row packs
// larger than in version 2. Measured on 200k todo-like snapshot rows (one
// bucket of 1,000, ids over 127): current_data3's heap 84.46 → 76.60
// bytes per row, its whole size with the key 125.26 → 117.39.
//
// At 10M todos (scale benchmark, one run against version 2's build in the
// same run; benchmarks/README.md, "the Scale benchmark at 10M todos"),
// before the compact memberships: P1 1.27× version 2's rate on two
// clusters and 1.55× on one, Postgres CPU per source row on one cluster
// 15.2 → 9.8 µs, and on one cluster snapshot done → first checkpoint
// 11.3 → 9.8 s (the stream decodes less of storage's WAL). The first
// checkpoint on one cluster is why the order pays: the stream still
// reads the snapshot's storage WAL after the snapshot (consuming the slot
// during the snapshot, holding back the changes of tables not yet
// snapshotted, is the next lever if 10 s is not enough), and storage
// writes less of it when the snapshot appends to the key. The cost is the
// key's fill: ascending inserts into the middle of a B-tree (the two
// snapshot workers' ranges) split pages 50/50 and never come back to them
// — PostgreSQL fills only the rightmost page to its fillfactor — so the
// key's leaves are about 58 % full (617 MB at 10M against version 2's
// 526 MB, whose random inserts refill half-empty pages); rebuilding it
// after a group's snapshot would take it to 90 %.
//
// # Clearing
//
// Clear and Terminate delete a group's rows in bounded batches (a TID scan
// over at most BatchSize ctids per statement, each its own transaction), so
// clearing millions of ops never holds one giant transaction; they can be
// interrupted and resumed. A group of version 2 or 3 has its ops and current
// rows in partitions of its own. Clear, which resets a group that is
// written again, TRUNCATEs them and keeps its bucket names. Terminate,
// which retires a group for good, drops them and deletes its bucket
// names, so that every group ever retired does not leave two empty tables
// with their indexes behind, which would slow planning of every statement
// on the parents (PostgreSQL's generic plans lock every partition).
//
// Dropping a partition must not stop other groups: a plain DETACH
// PARTITION, or DROP of an attached partition, takes ACCESS EXCLUSIVE on
// the parent, which queues behind any open transaction that read the
// parent (an API stream of any group) and stops every later statement of
// every group behind it. Terminate detaches with DETACH PARTITION …
// CONCURRENTLY, which takes SHARE UPDATE EXCLUSIVE on the parent (no read
// or write waits for it; only another group's ATTACH, at its creation),
// marks the partition detach pending, so that new queries leave it out,
// and waits for the transactions that may still use it; the detached
// table is then dropped, which waits for nobody. It does not TRUNCATE
// first: TRUNCATE takes ACCESS EXCLUSIVE on the partition, which a generic
// plan of any group's statement on the parent locks too, so it would
// queue behind a long reader of another group and stop that group's
// statements (TestTerminateNeverBlocksOtherGroups fails with it); the
// space is given back when the drop follows the detach. Each statement's
// wait is bounded (statement_timeout: ClearOptions.DropTimeout, 10 s by
// default): a retire that times out fails and is retried (replication's
// retire unit backs off), and the next one finishes a detach left
// pending with DETACH … FINALIZE. A parent can have one partition detach
// pending at a time, so a retire finishes another group's pending detach
// before its own. Terminate marks the group TERMINATED before it clears
// it; Catalog.Retiring lists terminated groups that still hold anything
// (tables, bucket names, a partition) with the stopped ones, so a retire
// cut off by a restart is finished by the next process that starts or
// sees a takeover.
package bucketstore
