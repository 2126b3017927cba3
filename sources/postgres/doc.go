// Package postgres is the PostgreSQL replication source: chunked,
// parallel, resumable snapshots and pgoutput streaming.
//
// The snapshot side, in the order replication uses it:
//
//   - Preflight checks wal_level, the REPLICATION attribute, the tables and
//     the publication, and reports every problem at once, each as one line
//     saying what to run. SlotHealth reads pg_replication_slots (wal_status
//     "lost": the server invalidated the slot).
//   - Discover reads each table's columns, replica identity, key and size
//     estimate from the catalog.
//   - SplitRanges cuts a large table into key ranges (Lower, Upper] for
//     parallel readers, from quantiles of a TABLESAMPLE of its key.
//   - A SnapshotReader reads one range in key order, one short
//     keyset-paginated statement per chunk (no long transaction), and
//     resumes after any committed Chunk.LastKey. It satisfies the shape of
//     a pipeline source: Next returns pipeline.ErrEndOfInput at the end.
//
// The stream side, one reader and one decoder for every sink:
//
//   - A StreamReader turns the slot's batches (logrepl) into pipeline
//     batches of changes bound to their tables, with the position each
//     batch leaves off at, also inside a transaction too large for one
//     batch; resumed inside one, it skips the changes the sink holds. It
//     follows a table by OID through renames, and hands shape changes,
//     rows read aside (re-reads) and catalog checks to small interfaces
//     the pipeline's assembly implements (StreamTables, StreamAside,
//     StreamCatalog), so storage-specific work stays there.
//   - Decode (with a StreamDecoder) turns the changes into typed rows. A
//     value an UPDATE left out as unchanged TOAST is merged from the row's
//     previous state — pending in the decoder, or stored in the sink
//     (RowStore) — or, as the last resort, read from the source by key.
//
// # Values
//
// Source values become sync-rule values as SPEC §3 and PowerSync prescribe
// (see DecodeText for the exact mapping, arrays included). The snapshot asks
// for int2/int4/int8/oid/float4/float8/bool/bytea/uuid/timestamptz in binary
// and decodes rows into per-chunk arenas with almost no allocation; the
// stream decodes pgoutput's text with DecodeText. Both produce identical
// values for the same stored row, provided both sessions use SessionParams
// (ConnConfig sets them at connection startup; the snapshot reader also sets
// them on its session).
package postgres
