package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/freelist"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
)

// StreamProgress is the stream position a stream write records in its own
// transaction, so that a restart resumes exactly after what storage holds:
// every source change is applied once, whatever the crash point.
type StreamProgress struct {
	// LSN is the end LSN of the last complete source transaction written
	// (or an idle position after it): the stream restarts there.
	LSN pglogrepl.LSN
	// TxnLSN, when set, is the commit LSN of a source transaction too
	// large for one write, of which storage now holds the first TxnChanges
	// changes. No checkpoint is published while it is set: a client never
	// sees part of a source transaction. A restarted stream receives the
	// transaction again from its start and skips those changes.
	TxnLSN     pglogrepl.LSN
	TxnChanges int64
	// Tables are table records changed with this write.
	Tables []TableUpdate
}

// TableUpdate changes what storage records about one source table, in the
// transaction of the write that carries it.
type TableUpdate struct {
	// ID is the table's storage id (model.Table.ID).
	ID string
	// Shape, when set, replaces the recorded shape, and ReplicaIDColumns
	// the replica identity columns: the rows written from now on follow
	// them.
	Shape            []byte
	ReplicaIDColumns []string
	// RelationID, when set with Shape, records the source relation (OID)
	// the rows written from now on come from: another table took the
	// name (dropped and re-created, or renamed into place).
	RelationID uint32
	// Resnapshot, when set, records the progress of the table's re-read.
	Resnapshot *ResnapshotProgress
}

// ResnapshotProgress is how far the re-read of a table whose shape changed
// got. While any table of a group is being re-read, no checkpoint of the
// group is published (its rows are a mix of states until the stream has
// passed the end of the re-read).
type ResnapshotProgress struct {
	// LastKey is the key of the last row re-read (text forms of the key
	// columns); nil when the re-read (re)starts.
	LastKey []string
	// Rows counts the rows re-read so far.
	Rows int64
	// Done ends the re-read. DoneLSN, the source position after its last
	// read, becomes the group's no_checkpoint_before (if higher).
	Done    bool
	DoneLSN pglogrepl.LSN
}

// WriteStream persists a stream batch and records p with its last
// transaction. Changes are written as by WriteChanges; a Truncate item
// removes every stored row of its table (in bounded transactions of its
// own, see Truncate) at its place in the batch. Only the last transaction
// records p, so a batch holding a Truncate is exact after a crash only if
// replaying it is harmless: the stream gives each TRUNCATE a batch of its
// own (removing rows already removed is a no-op).
func (w *Writer) WriteStream(ctx context.Context, changes []model.Change, p StreamProgress) (Result, error) {
	var total Result
	items := changes
	for {
		i := slices.IndexFunc(items, isTruncate)
		if i < 0 {
			res, err := w.writeChanges(ctx, items, &p, nil)
			total.add(res)
			return total, err
		}
		if i > 0 {
			res, err := w.writeChanges(ctx, items[:i], nil, nil)
			total.add(res)
			if err != nil {
				return total, err
			}
		}
		res, err := w.Truncate(ctx, items[i].Table, 0)
		total.add(res)
		if err != nil {
			return total, err
		}
		items = items[i+1:]
	}
}

// isTruncate reports whether c is a TRUNCATE item, which WriteStream
// writes apart from the changes around it.
func isTruncate(c model.Change) bool { return c.Kind == model.Truncate }

// queueProgress queues writing p on tail, the statements that run last in
// their transaction, so the group row is locked only for the commit
// (Commit locks it too).
func queueProgress(tail *pgx.Batch, group int, p *StreamProgress) {
	for _, u := range p.Tables {
		queueTable(tail, group, u)
	}
	var txn *string
	if p.TxnLSN != 0 {
		s := p.TxnLSN.String()
		txn = &s
	}
	tail.Queue(`UPDATE groups SET stream_lsn = GREATEST(coalesce(stream_lsn, '0/0'), $2::pg_lsn),
		stream_txn_lsn = $3::pg_lsn, stream_txn_changes = $4 WHERE id = $1`,
		group, p.LSN.String(), txn, p.TxnChanges)
}

func queueTable(tail *pgx.Batch, group int, u TableUpdate) {
	if u.Shape != nil {
		tail.Queue(`UPDATE source_tables SET shape = $2::jsonb, replica_id_columns = $3,
			relation_id = coalesce(nullif($4::oid, 0), relation_id) WHERE id = $1`,
			u.ID, string(u.Shape), u.ReplicaIDColumns, u.RelationID)
	}
	r := u.Resnapshot
	if r == nil {
		return
	}
	tail.Queue(`UPDATE source_tables SET resnapshot = $2, resnapshot_key = $3, resnapshot_rows = $4 WHERE id = $1`,
		u.ID, !r.Done, r.LastKey, r.Rows)
	if r.Done {
		tail.Queue(`UPDATE groups SET no_checkpoint_before = GREATEST(coalesce(no_checkpoint_before, '0/0'), $2::pg_lsn)
			WHERE id = $1`, group, r.DoneLSN.String())
	}
}

// StreamResume returns the stream position storage holds for group (ok is
// false before the first stream write).
func (s *Writes) StreamResume(ctx context.Context, group int) (p StreamProgress, ok bool, err error) {
	var lsn, txn *string
	err = s.pool.QueryRow(ctx, `SELECT stream_lsn::text, stream_txn_lsn::text, stream_txn_changes FROM groups WHERE id = $1`, group).
		Scan(&lsn, &txn, &p.TxnChanges)
	if err != nil {
		return p, false, fmt.Errorf("resume stream of group %d: %w", group, err)
	}
	if lsn == nil {
		return StreamProgress{}, false, nil
	}
	if p.LSN, err = pglogrepl.ParseLSN(*lsn); err != nil {
		return p, false, fmt.Errorf("resume stream of group %d: %w", group, err)
	}
	if txn != nil {
		if p.TxnLSN, err = pglogrepl.ParseLSN(*txn); err != nil {
			return p, false, fmt.Errorf("resume stream of group %d: %w", group, err)
		}
	} else {
		p.TxnChanges = 0
	}
	return p, true, nil
}

// StreamWriter writes one group's stream batches, one at a time, taking a
// storage connection per batch and keeping its encode buffers grown from
// batch to batch. Prepare may read the next batch's stored state while a
// Write runs.
type StreamWriter struct {
	s     *Writes
	group int
	fence Fence
	bufs  writeBufs

	// done counts completed writes; history remembers the last ones, for
	// judging what a Prepared read before they completed. Only Write
	// changes them (Prepare reads done), and broken, set by a failed
	// write, makes every later write read its rows itself.
	done     atomic.Uint64
	history  [writtenKept]written
	broken   bool
	prepared freelist.List[*Prepared]
	// slices bounds the slices a read ahead takes (readSlices): probeSlices,
	// and half the storage pool at most, for the stream's writer,
	// checkpoints and other groups need theirs.
	slices int
}

// NewStreamWriter returns a stream writer for group whose writes carry f
// (see Fence; the zero Fence checks nothing).
func (s *Writes) NewStreamWriter(group int, f Fence) *StreamWriter {
	return &StreamWriter{s: s, group: group, fence: f, prepared: freelist.List[*Prepared]{Max: writtenKept},
		slices: min(probeSlices, int(s.pool.Config().MaxConns)/2)}
}

// Write persists one stream batch durably with its progress (WriteStream).
// prep, when set, is the batch's stored state read ahead by Prepare (of
// this writer and these changes); Write takes it over.
func (sw *StreamWriter) Write(ctx context.Context, changes []model.Change, p StreamProgress, prep *Prepared) (Result, error) {
	if prep != nil {
		defer sw.release(prep)
	}
	// After any failure, whether a write committed is unknown: nothing
	// read ahead can be judged any more.
	w, err := sw.s.newWriter(ctx, sw.group, sw.fence, &sw.bufs)
	if err != nil {
		sw.broken = true
		return Result{}, err
	}
	defer w.Close()
	var res Result
	again := 0 // rows of prep read again
	if prep != nil {
		stale, all := sw.stale(prep)
		again = len(stale)
		if all {
			again = len(prep.final)
		}
		res, err = w.writeChanges(ctx, changes, &p, &readAhead{p: prep, stale: stale, all: all})
	} else {
		res, err = w.WriteStream(ctx, changes, p)
	}
	if err != nil {
		sw.broken = true
		return res, err
	}
	switch {
	case prep != nil:
		sw.s.counters.readAhead.Add(int64(len(prep.final)))
		sw.s.counters.readAgain.Add(int64(again))
		sw.remember(prep.final, false)
	case slices.ContainsFunc(changes, isTruncate):
		sw.remember(nil, true)
	default:
		sw.remember(w.final, false)
	}
	return res, nil
}

// commitStream publishes a checkpoint of group at source position lsn
// covering every op committed so far (Writes.Commit keeps it below any
// writer still in flight, and refuses while a transaction or a
// re-snapshot is half written). It fails with ErrStorageRestarted when
// storage restarted since f.Epoch: the ops it would cover may have been
// lost; and with ErrLeaseLost, recording nothing, once another process
// holds f's lease: the new holder resumes from the position it read on
// taking over, so the slot must not be confirmed past it.
func (s *Writes) commitStream(ctx context.Context, group int, lsn pglogrepl.LSN, f Fence) (Checkpoint, bool, error) {
	return s.commit(ctx, group, lsn, 0, f, true)
}

// makeDurable is MakeDurable on the storage run epoch.
func (s *Writes) makeDurable(ctx context.Context, epoch uint64) error {
	conn, err := s.acquire(ctx, epoch, "flush storage WAL")
	if err != nil {
		return err
	}
	defer conn.Release()
	err = durably(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_current_xact_id()") // a commit record to wait for
		return err
	})
	if err != nil {
		return fmt.Errorf("flush storage WAL: %w", err)
	}
	return nil
}

// StreamTables is the side data of a stream batch (pipeline.Attach) with
// the table records its write changes (StreamProgress.Tables): shapes and
// re-read progress that must be stored in the transaction of the batch
// whose rows follow them. The stream's source attaches it; the Sink's
// stream writer stores it. It is side data, not part of sinks.Position,
// because only bucket storage knows these records and nothing resumes
// from them.
var StreamTables = pipeline.NewKey[[]TableUpdate]("bucketstore table updates")

// preparedKey is the side data under which the stream writer's Prepare
// hands a batch's read-ahead to its Write.
var preparedKey = pipeline.NewKey[*Prepared]("bucketstore prepared")

// StreamWriter returns the stream's one writer for a new stream run
// (sinks.OrderedStream): a group's stream changes must apply in order,
// and its writes' read-ahead is judged by the writes before them, which
// only a single writer knows (see Prepared).
func (k *Sink) StreamWriter(ctx context.Context) (sinks.Writer, error) {
	// A position-only batch is recorded by its commit alone, unless the
	// stored position is inside a source transaction, whose record only a
	// write clears.
	p, _, err := k.writes.StreamResume(ctx, k.group)
	if err != nil {
		return nil, err
	}
	return &sinkStreamWriter{sw: k.writes.NewStreamWriter(k.group, k.fence), storedInTxn: p.TxnLSN != 0}, nil
}

// sinkStreamWriter adapts a StreamWriter to sinks.Writer and
// sinks.Preparer.
type sinkStreamWriter struct {
	sw *StreamWriter
	// storedInTxn is set while the stored position may be inside a
	// source transaction.
	storedInTxn bool
}

// Prepare reads the stored state of the batch's rows ahead of its Write
// (StreamWriter.Prepare) and attaches it to the batch.
func (w *sinkStreamWriter) Prepare(ctx context.Context, b sinks.Batch) (sinks.Batch, error) {
	prep, err := w.sw.Prepare(ctx, b.Items)
	if prep != nil {
		pipeline.Attach(&b, preparedKey, prep)
	}
	return b, err
}

// Write writes a stream batch with its position and table records, using
// what Prepare read for it.
func (w *sinkStreamWriter) Write(ctx context.Context, b sinks.Batch) error {
	tables, _ := pipeline.Attached(b, StreamTables)
	pos := b.Progress
	if len(b.Items) == 0 && len(tables) == 0 && pos.TxnLSN == 0 && !w.storedInTxn {
		// A position only: the commit records it (an idle stream's one
		// storage transaction per position, see replication's doc.go).
		return nil
	}
	prep, _ := pipeline.Attached(b, preparedKey)
	p := streamProgress(pos, tables)
	if _, err := w.sw.Write(ctx, b.Items, p, prep); err != nil {
		return err
	}
	w.storedInTxn = pos.TxnLSN != 0
	return nil
}

// streamProgress is what a stream write records in storage for a batch
// ending at pos: the position, inside a source transaction if pos is, and
// the table records written with it.
func streamProgress(pos sinks.Position, tables []TableUpdate) StreamProgress {
	return StreamProgress{LSN: pglogrepl.LSN(pos.LSN), TxnLSN: pglogrepl.LSN(pos.TxnLSN), TxnChanges: pos.TxnChanges, Tables: tables}
}
