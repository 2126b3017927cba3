package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/sinks"
)

// TypeName is the sink type bucket storage is registered under; it is the
// default sink of a YAML pipeline.
const TypeName = "bucketstore"

func init() { sinks.MustRegister(TypeName, Spec, openSink) }

// Spec declares the bucketstore sink's settings: none. The group a
// pipeline writes to is not a setting: `syncpipe run` creates a group per
// sync rules version and moves to a new one when the rules change or the
// slot is lost, retiring the old one, so a group named in the config would
// be written to after its retirement, or never (it was accepted and
// ignored until the bucketstore pipeline ran through this sink).
var Spec = sinks.Spec{
	Summary: "PowerSync-style bucket storage in the database of the storage section, served by the sync API (the default sink). " +
		"The replication group it writes to is the one `syncpipe run` keeps for the sync rules version, not a setting.",
}

// Sink adapts the write role (Writes) to sinks.Sink for one replication
// group: the sink the group's snapshot ranges and its stream run through
// (stages.Chain).
//
// Snapshot batches (Position.Table set) are written insert-only with
// WriteSnapshot and their Commit records the range's progress. The stream
// is a sinks.OrderedStream: its one writer (StreamWriter) reads the stored
// state of a batch's rows ahead (sinks.Preparer, see Prepared) and writes
// the batch with its position and table records (StreamTables) in one
// transaction; its Commit publishes a checkpoint at the batch's LSN
// covering every op committed so far (Writes.Commit keeps it below any
// writer still in flight), and reports whether it did (sinks.Publisher).
type Sink struct {
	writes *Writes
	group  int
	fence  Fence
	owner  *Store // the store the registry factory opened; Close closes it

	mu     sync.Mutex
	tables map[string]string
}

// Sink returns a sinks.Sink writing to group.
func (s *Writes) Sink(group int) *Sink {
	return &Sink{writes: s, group: group, tables: map[string]string{}}
}

// FencedSink is Sink for a work unit holding a lease: its writes and range
// commits go through only while f holds (see Fence).
func (s *Writes) FencedSink(group int, f Fence) *Sink {
	k := s.Sink(group)
	k.fence = f
	return k
}

// openSink is the registry factory, for programs that open sinks by name:
// it opens the storage env.Storage names and writes to the newest group
// that is not terminated. (`syncpipe run` gives each unit of a group a Sink
// of its own, fenced by the unit's lease: Writes.FencedSink.)
func openSink(ctx context.Context, _ *sinks.Settings, env sinks.Env) (sinks.Sink, error) {
	st := env.Storage
	if st.URI == "" {
		return nil, errors.New("bucketstore needs the storage section of a syncpipe config")
	}
	store, err := Open(ctx, Config{URI: st.URI, Schema: st.Schema, MaxConns: int32(st.MaxConns),
		SynchronousCommit: st.SynchronousCommit, ConnectTimeout: st.ConnectTimeout, Logger: env.Logger})
	if err != nil {
		return nil, err
	}
	gs, err := store.Catalog().Groups(ctx)
	if err != nil || len(gs) == 0 {
		store.Close()
		return nil, fmt.Errorf("no replication group in storage to write to (start `syncpipe run` first): %v", err)
	}
	k := store.Writes().Sink(gs[len(gs)-1].ID)
	k.owner = store
	return k, nil
}

// Writer returns a writer that takes a storage connection and a set of
// encode buffers per batch, so writers of finished runs hold nothing.
func (k *Sink) Writer(ctx context.Context, i int) (sinks.Writer, error) {
	return &sinkWriter{k: k}, nil
}

// sinkWriter is one flush worker's writer.
type sinkWriter struct{ k *Sink }

// Write persists one batch durably (its transaction has committed).
func (w *sinkWriter) Write(ctx context.Context, b sinks.Batch) error {
	k := w.k
	bufs := k.writes.takeBufs()
	defer k.writes.spare.Put(bufs) // after wr.Close has put the buffers back in bufs
	wr, err := k.writes.newWriter(ctx, k.group, k.fence, bufs)
	if err != nil {
		return err
	}
	defer wr.Close()
	if !b.Progress.IsStream() {
		_, err := wr.WriteSnapshot(ctx, b.Items)
		return err
	}
	// A stream batch here comes from a pipeline wired without
	// stages.Chain (sinks.FlushAndCommit), which knows no OrderedStream:
	// written without read-ahead or table records, in order only with one
	// flush writer. Its position inside a source transaction is recorded
	// as the stream's is, so no checkpoint publishes part of one. Nothing
	// is visible to clients before Commit publishes a checkpoint.
	_, err = wr.WriteStream(ctx, b.Items, streamProgress(b.Progress, nil))
	return err
}

// Commit records the batch's position: snapshot range progress, or a
// checkpoint at the stream position (CommitPublish).
func (k *Sink) Commit(ctx context.Context, b sinks.Batch) error {
	_, err := k.CommitPublish(ctx, b)
	return err
}

// CommitPublish is Commit reporting whether it published a checkpoint
// (sinks.Publisher). A stream batch ending inside a source transaction
// publishes nothing (a client never sees part of one), nor does a
// snapshot batch. A checkpoint is refused, publishing nothing, while a
// transaction or a re-read is half written (see StreamWriter.Commit for
// its errors); a published one is flushed to disk.
func (k *Sink) CommitPublish(ctx context.Context, b sinks.Batch) (bool, error) {
	pos := b.Progress
	if !pos.IsStream() {
		return false, k.commitRange(ctx, pos)
	}
	if pos.TxnLSN != 0 {
		return false, nil
	}
	_, published, err := k.writes.commitStream(ctx, k.group, pglogrepl.LSN(pos.LSN), k.fence)
	return published, err
}

// MakeDurable returns once every storage commit that completed before the
// call is on disk. Writers may run with synchronous_commit=off for speed;
// the stream calls this before acknowledging an LSN to the source, so the
// acknowledged position always comes from a durable record: a transaction
// with synchronous_commit=on flushes the WAL up to its own commit record,
// which follows every earlier commit — on the same server run, hence the
// sink's Fence.Epoch (ErrStorageRestarted: those commits may be gone).
func (k *Sink) MakeDurable(ctx context.Context) error {
	return k.writes.makeDurable(ctx, k.fence.Epoch)
}

func (k *Sink) tableID(ctx context.Context, table string) (string, error) {
	k.mu.Lock()
	id, ok := k.tables[table]
	k.mu.Unlock()
	if ok {
		return id, nil
	}
	schema, name, found := strings.Cut(table, ".")
	if !found {
		schema, name = "public", table
	}
	err := k.writes.pool.QueryRow(ctx, `SELECT id FROM source_tables WHERE group_id = $1 AND schema_name = $2 AND table_name = $3`,
		k.group, schema, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("table %s is not registered in group %d", table, k.group)
	}
	if err != nil {
		return "", fmt.Errorf("look up table %s: %w", table, err)
	}
	k.mu.Lock()
	k.tables[table] = id
	k.mu.Unlock()
	return id, nil
}

// commitRangeSQL stores a snapshot range's progress; the fenced form only
// while the unit's lease holds ($6, $7).
const (
	commitRangeSQL = `
		INSERT INTO snapshot_ranges (source_table_id, range_no, last_key, rows_done, done)
		SELECT $1, $2, $3, $4, $5 %s
		ON CONFLICT (source_table_id, range_no) DO UPDATE
		SET last_key = EXCLUDED.last_key, rows_done = EXCLUDED.rows_done, done = EXCLUDED.done`
)

var (
	plainCommitRangeSQL  = fmt.Sprintf(commitRangeSQL, "")
	fencedCommitRangeSQL = fmt.Sprintf(commitRangeSQL, "WHERE "+fmt.Sprintf(fenceSQL, 6, 7))
)

// commitRange stores a snapshot range's progress. A range's last commit
// (pos.Done) waits for its WAL flush: the process counts the range done
// from then on and never reads it again, so a storage crash must not take
// the mark (or the range's rows before it) back. The commits before it may
// be lost in a crash; the sink's epoch (Fence.Epoch) then fails the next
// one, and the range resumes from what storage kept.
func (k *Sink) commitRange(ctx context.Context, pos sinks.Position) error {
	id, err := k.tableID(ctx, pos.Table)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("commit progress of %s range %d", pos.Table, pos.Range)
	args := []any{id, pos.Range, pos.LastKey, pos.RowsDone, pos.Done}
	q := plainCommitRangeSQL
	if k.fence.Lease != "" {
		q, args = fencedCommitRangeSQL, append(args, k.fence.Lease, k.fence.Token)
	}
	conn, err := k.writes.acquire(ctx, k.fence.Epoch, what)
	if err != nil {
		return err
	}
	defer conn.Release()
	var tag pgconn.CommandTag
	if pos.Done {
		err = durably(ctx, conn, func(tx pgx.Tx) error {
			tag, err = tx.Exec(ctx, q, args...)
			return err
		})
	} else {
		tag, err = conn.Exec(ctx, q, args...)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return k.fence.lost(what)
	}
	return nil
}

// Resume returns a range's committed progress, or the stream's position.
func (k *Sink) Resume(ctx context.Context, table string, rangeNo int) (sinks.Position, bool, error) {
	if table == "" {
		var lsn *string
		err := k.writes.pool.QueryRow(ctx, `SELECT stream_lsn::text FROM groups WHERE id = $1`, k.group).Scan(&lsn)
		if err != nil {
			return sinks.Position{}, false, fmt.Errorf("resume stream of group %d: %w", k.group, err)
		}
		if lsn == nil {
			return sinks.Position{}, false, nil
		}
		l, err := pglogrepl.ParseLSN(*lsn)
		return sinks.Position{LSN: uint64(l)}, err == nil, err
	}
	id, err := k.tableID(ctx, table)
	if err != nil {
		return sinks.Position{}, false, err
	}
	pos := sinks.Position{Table: table, Range: rangeNo}
	// The read marks the unit's lease started (see claimUnitsSQL): the
	// unit works from here on, and the autoscaling counts say so. A unit
	// whose lease was taken since it was claimed (a steal) learns it here,
	// before it reads anything.
	var held, found bool
	err = k.writes.pool.QueryRow(ctx, `WITH started AS (
		  UPDATE leases SET started = true WHERE name = $3 AND token = $4 AND NOT started)
		SELECT $3 = '' OR EXISTS (SELECT 1 FROM leases WHERE name = $3 AND token = $4), r.last_key, coalesce(r.rows_done, 0), coalesce(r.done, false), r.range_no IS NOT NULL
		FROM (SELECT 1) one LEFT JOIN snapshot_ranges r ON r.source_table_id = $1 AND r.range_no = $2`,
		id, rangeNo, k.fence.Lease, k.fence.Token).Scan(&held, &pos.LastKey, &pos.RowsDone, &pos.Done, &found)
	switch {
	case err != nil:
		return sinks.Position{}, false, fmt.Errorf("resume %s range %d: %w", table, rangeNo, err)
	case !held:
		return sinks.Position{}, false, k.fence.lost(fmt.Sprintf("resume %s range %d", table, rangeNo))
	case !found:
		return sinks.Position{}, false, nil
	}
	return pos, true, nil
}

// Close closes the store if the sink opened it.
func (k *Sink) Close(ctx context.Context) error {
	if k.owner != nil {
		k.owner.Close()
	}
	return nil
}
