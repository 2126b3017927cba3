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
func (s *Store) StreamResume(ctx context.Context, group int) (p StreamProgress, ok bool, err error) {
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
	s     *Store
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
}

// NewStreamWriter returns a stream writer for group whose writes carry f
// (see Fence; the zero Fence checks nothing).
func (s *Store) NewStreamWriter(group int, f Fence) *StreamWriter {
	return &StreamWriter{s: s, group: group, fence: f, prepared: freelist.List[*Prepared]{Max: writtenKept}}
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

// Commit publishes a checkpoint of the writer's group at source position
// lsn covering every op committed so far (Store.Commit keeps it below any
// writer still in flight, and refuses while a transaction or a
// re-snapshot is half written). It fails with ErrStorageRestarted when
// storage restarted since the writer's Fence.Epoch: the ops it would
// cover may have been lost; and with ErrLeaseLost, recording nothing, once
// another process holds the writer's lease: the new holder resumes from
// the position it read on taking over, so the slot must not be confirmed
// past it.
func (sw *StreamWriter) Commit(ctx context.Context, lsn pglogrepl.LSN) (Checkpoint, bool, error) {
	return sw.s.commitStream(ctx, sw.group, lsn, sw.fence)
}

// commitStream is Commit for group, fenced with f.
func (s *Store) commitStream(ctx context.Context, group int, lsn pglogrepl.LSN, f Fence) (Checkpoint, bool, error) {
	return s.commit(ctx, group, lsn, 0, f, true)
}

// MakeDurable returns once every storage commit that completed before the
// call is on disk. Writers may run with synchronous_commit=off for speed;
// the stream calls this before acknowledging an LSN to the source, so the
// acknowledged position always comes from a durable record: a transaction
// with synchronous_commit=on flushes the WAL up to its own commit record,
// which follows every earlier commit — on the same server run, hence the
// writer's Fence.Epoch (ErrStorageRestarted: those commits may be gone).
func (sw *StreamWriter) MakeDurable(ctx context.Context) error {
	conn, err := sw.s.acquire(ctx, sw.fence.Epoch, "flush storage WAL")
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
