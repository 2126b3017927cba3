package bucketstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// streamLockClass is the first key of the transaction-level advisory lock
// that serializes a group's stream writes (the second is the group id).
// One lock per write instead of a row lock per changed row: row locks write
// WAL and dirty a page for every row, and every byte of WAL is read again
// by the source's walsender when storage shares its cluster.
const streamLockClass = 0x5359 // "SY"

// emptyParams is the parameter entry that retracts a lookup a row no
// longer produces: the newest entry per (lookup, row) wins, and it is empty.
var emptyParams = []byte("[]")

// WriteChanges persists streamed changes of any tables. For every row it
// writes a PUT in each bucket the row is in now and a REMOVE in each bucket
// it was in before and is not any more (from the stored previous
// membership), retracts parameter lookups the row no longer produces, and
// replaces the row's stored state. Several changes of one row in a batch
// collapse to the last: storage only ever shows batch boundaries.
func (w *Writer) WriteChanges(ctx context.Context, changes []model.Change) (Result, error) {
	return w.writeChanges(ctx, changes, nil, nil)
}

// writeChanges is WriteChanges recording p, when set, in the same
// transaction as the ops (see WriteStream), and using the state of the
// rows read ahead when ahead is set (Prepared).
func (w *Writer) writeChanges(ctx context.Context, changes []model.Change, p *StreamProgress, ahead *readAhead) (Result, error) {
	start := time.Now()
	var final []*model.Change
	var prev *prevState
	var probe []any // loadPrevious's arguments
	if ahead != nil {
		final, prev, probe = ahead.p.final, &ahead.p.prev, ahead.p.probe
	} else {
		w.final, w.byRow = collapse(w.final, w.byRow, changes)
		final, prev = w.final, &w.prev
		ids, keys, orders := probeRows(final, probedRow)
		tables, err := w.s.tableArg(ctx, w.conn, w.lay, w.group, ids)
		if err != nil {
			return Result{}, fmt.Errorf("write %d changes for group %d: %w", len(changes), w.group, err)
		}
		probe = w.lay.probeArgs(w.group, tables, keys, orders)
	}
	if err := w.prepareNames(ctx, len(final), func(i int) *model.Change { return final[i] }); err != nil {
		return Result{}, fmt.Errorf("write %d changes for group %d: %w", len(changes), w.group, err)
	}
	var staleProbe []any
	if ahead != nil && len(ahead.stale) > 0 {
		ids, keys, orders := probeSubset(final, ahead.stale)
		tables, err := w.s.tableArg(ctx, w.conn, w.lay, w.group, ids)
		if err != nil {
			return Result{}, fmt.Errorf("write %d changes for group %d: %w", len(changes), w.group, err)
		}
		staleProbe = w.lay.probeArgs(w.group, tables, keys, orders)
	}
	var res Result
	attempts := 0
	head := func(b *pgx.Batch) {
		b.Queue("SELECT pg_advisory_xact_lock($1, $2)", streamLockClass, w.group)
		switch {
		case ahead == nil || ahead.all || attempts > 0:
			prev.reset(len(final))
			b.Queue(w.lay.loadPrevious, probe...).Query(func(rows pgx.Rows) error { return scanPrevious(rows, prev, w.lay) })
		case len(ahead.stale) > 0:
			// Rows a write since the read ahead changed: read again.
			prev.forget(ahead.stale)
			b.Queue(w.lay.loadPrevious, staleProbe...).Query(func(rows pgx.Rows) error { return scanPrevious(rows, prev, w.lay) })
		}
		attempts++
		w.queueAllocate(b, estimateIDs(final))
	}
	err := w.write(ctx, head, func(tx pgx.Tx, tail *pgx.Batch) error {
		res = Result{}
		if err := w.replaceCurrent(ctx, tx, final, prev); err != nil {
			return err
		}
		need := 0
		for i, c := range final {
			p := &prev.rows[i]
			need += len(c.Puts) + len(c.Lookups) + prev.memberCount(p) + count(prev.bytes(p.lookups))
		}
		// need over-counts (kept buckets get no REMOVE); unused ids are gaps.
		if err := w.allocate(ctx, tx, need); err != nil {
			return err
		}
		if err := w.findLeaving(ctx, tx, final, prev); err != nil {
			return err
		}
		w.encodeStream(final, prev, &res)
		if err := w.flushOps(ctx, tx, tail, &res); err != nil {
			return err
		}
		if p != nil {
			queueProgress(tail, w.group, p)
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("write %d changes for group %d: %w", len(changes), w.group, err)
	}
	w.s.counters.record(res, time.Since(start))
	return res, nil
}

// encodeStream encodes the ops and parameter entries of a stream write of
// final, whose rows' stored state is prev, taking op ids from w.ids.
func (w *Writer) encodeStream(final []*model.Change, prev *prevState, res *Result) {
	w.ops.reset()
	w.params.reset()
	w.changed.reset(true)
	next := 0
	take := func() int64 { id := w.ids[next]; next++; return id }
	left := 0 // v2: the next of w.leaving
	// Every REMOVE of the batch precedes every PUT: a row whose replica
	// id changed (a key update, or any update under REPLICA IDENTITY
	// FULL) leaves its object under the old id and enters it under the
	// new one, and the client, which knows objects by type and id, must
	// see the PUT last whatever order the two ids sort in.
	for i, c := range final {
		if prev.rows[i].unchanged {
			continue
		}
		remove := func(bucket string, bucketID int64, typ, id string) {
			w.subkey = checksum.AppendSubkey(w.subkey[:0], c.Table.ID, uuid.UUID(c.Key))
			w.encodeRemove(c, bucket, bucketID, typ, id, checksum.Remove(string(w.subkey)), take(), res)
		}
		if w.lay.interned {
			for ; left < len(w.leaving) && w.leaving[left].row == int32(i); left++ {
				m := &w.leaving[left].m
				remove(w.idNames[m.bucket], m.bucket, m.objectType(c.Table.Name), m.objectID())
			}
			continue
		}
		elems(prev.bytes(prev.rows[i].buckets), func(m []byte) bool {
			if !hasPut(c.Puts, m) {
				bucket, typ, id := splitMember(m)
				remove(bucket, 0, typ, id)
			}
			return true
		})
	}
	// PUTs go in bucket order, as in a snapshot write: each bucket's ops
	// of the batch then share heap pages, and the primary key's inserts
	// walk its leaves in order instead of at random.
	w.order = w.order[:0]
	for i, c := range final {
		for j := range c.Puts {
			w.order = append(w.order, putRef{c.Puts[j].Bucket, int32(i), int32(j)})
		}
	}
	slices.SortFunc(w.order, func(a, b putRef) int {
		if c := strings.Compare(a.bucket, b.bucket); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.change, b.change), cmp.Compare(a.put, b.put))
	})
	for _, r := range w.order {
		c := final[r.change]
		w.encodePut(c, &c.Puts[r.put], take(), res)
	}
	for i, c := range final {
		res.Rows++
		if !prev.rows[i].unchanged {
			elems(prev.bytes(prev.rows[i].lookups), func(lk []byte) bool {
				if !hasLookup(c.Lookups, lk) {
					w.encodeParam(c, lk, emptyParams, take(), res)
				}
				return true
			})
		}
		for j := range c.Lookups {
			w.encodeParam(c, c.Lookups[j].Key, c.Lookups[j].Params, take(), res)
		}
	}
}

// leaving is a membership a v2 stream write's row final[row] leaves: a
// REMOVE to write.
type leaving struct {
	row int32
	m   member
}

// findLeaving finds the memberships a v2 stream write's rows leave
// (w.leaving, in row order, which encodeStream writes REMOVEs for) and
// the names of their buckets (their REMOVEs' change records name them),
// on tx: cached names cost nothing, others one read of bucket_names.
func (w *Writer) findLeaving(ctx context.Context, tx pgx.Tx, final []*model.Change, prev *prevState) error {
	w.leaving = w.leaving[:0]
	if !w.lay.interned {
		return nil
	}
	for i, c := range final {
		if prev.rows[i].unchanged {
			continue
		}
		forMembers(prev.bytes(prev.rows[i].buckets), prev.compact, func(m *member) bool {
			if !hasPutMember(c.Puts, c.Table.Name, m, w.bucketIDs) {
				w.leaving = append(w.leaving, leaving{int32(i), *m})
			}
			return true
		})
	}
	if len(w.leaving) == 0 {
		return nil
	}
	ids := make([]int64, len(w.leaving))
	for i := range w.leaving {
		ids[i] = w.leaving[i].m.bucket
	}
	names, err := w.s.bucketNamesOf(ctx, tx, w.group, ids)
	if err != nil {
		return err
	}
	w.idNames = names
	return nil
}

// collapse keeps the last change per row, ordered by (table id, key
// order, key): the previous-state probes and current row writes then walk
// v3's primary key in order. (v1 and v2 key by (table, key): this order
// walks theirs table by table only. Their groups are on their way out,
// and a stream batch's rows are few against a table's pages.) It reuses the memory of dst and of byRow (scratch space).
func collapse(dst []*model.Change, byRow []int32, changes []model.Change) ([]*model.Change, []int32) {
	byRow = byRow[:0]
	for i := range changes {
		byRow = append(byRow, int32(i))
	}
	// The batch position breaks ties, so that a row's last change ends
	// its run.
	slices.SortFunc(byRow, func(a, b int32) int {
		if c := compareRow(&changes[a], &changes[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	dst = dst[:0]
	for i, j := range byRow {
		if i+1 < len(byRow) && compareRow(&changes[j], &changes[byRow[i+1]]) == 0 {
			continue
		}
		dst = append(dst, &changes[j])
	}
	return dst, byRow
}

// compareRow orders changes by (table id, key order, key).
func compareRow(a, b *model.Change) int {
	if a.Table != b.Table {
		if c := strings.Compare(a.Table.ID, b.Table.ID); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(a.KeyOrder, b.KeyOrder); c != 0 {
		return c
	}
	return bytes.Compare(a.Key[:], b.Key[:])
}

// probedRow names a change's row for probeRows.
func probedRow(c *model.Change) (string, [16]byte, int32) { return c.Table.ID, c.Key, c.KeyOrder }

// estimateIDs guesses, before the rows' stored state is read, how many op
// ids a stream write needs: a row's PUTs and lookups, and as many REMOVEs
// and retractions again for what it had before (a deleted row: two). A
// batch that needs more draws them in a second round trip.
func estimateIDs(final []*model.Change) int {
	n := 0
	for _, c := range final {
		n += 2 * max(len(c.Puts)+len(c.Lookups), 1)
	}
	return n
}

// deleteCurrentSQL deletes a group's ($2) stored rows by ctid ($1): the
// group names the partition of a v2 group, whose ctids are its own.
const deleteCurrentSQL = `DELETE FROM {cur} WHERE ctid = ANY($1::tid[]) AND group_id = $2`

// truncateKeysSQL lists up to $4 keys and key orders of table $2[1] of
// group $1 after key $3 (v3: after key order $5 and key $3, the primary
// key's order).
const truncateKeysSQL = `SELECT source_key, {order} FROM {cur}
	WHERE group_id = $1 AND source_table = ($2::{ttype}[])[1] AND {after} LIMIT $4`

// replaceCurrent deletes the stored state of rows that had one and writes
// the new state of rows that still exist, leaving rows whose state stays
// the same untouched.
func (w *Writer) replaceCurrent(ctx context.Context, tx pgx.Tx, final []*model.Change, prev *prevState) error {
	var tids []pgtype.TID
	w.cur.reset()
	upserts := 0
	for i, c := range final {
		if p := &prev.rows[i]; p.found {
			if p.unchanged = prev.same(p, c, w.bucketIDs); p.unchanged {
				continue
			}
			tids = append(tids, p.tid)
		}
		if c.Kind == model.Upsert {
			w.encodeCurrent(c)
			upserts++
		}
	}
	if len(tids) > 0 {
		// No other writer changes the group's stored rows while this one holds
		// the stream lock, so the ctids read by loadPrevious still hold.
		if _, err := tx.Exec(ctx, w.lay.deleteCurrent, tids, w.group); err != nil {
			return fmt.Errorf("delete previous row state: %w", err)
		}
	}
	if upserts > 0 {
		w.cur.finish()
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, w.cur.reader(), w.lay.copyCurrent); err != nil {
			return fmt.Errorf("copy current rows: %w", err)
		}
	}
	return nil
}

// Truncate removes every row of a source table from the group: REMOVEs for
// all its bucket entries and retractions for its lookups, in batches of
// batchSize rows (default 10000), each batch one write.
func (w *Writer) Truncate(ctx context.Context, table *model.Table, batchSize int) (Result, error) {
	if batchSize <= 0 {
		batchSize = 10000
	}
	var total Result
	var after uuid.UUID
	var afterOrder int32 = math.MinInt32
	tables, err := w.s.tableArg(ctx, w.conn, w.lay, w.group, []string{table.ID})
	if err != nil {
		return total, fmt.Errorf("truncate %s: %w", table, err)
	}
	for {
		rows, err := w.conn.Query(ctx, w.lay.truncateKeys, w.lay.truncateArgs(w.group, tables, after, afterOrder, batchSize)...)
		if err != nil {
			return total, fmt.Errorf("truncate %s: list rows: %w", table, err)
		}
		var changes []model.Change
		var key uuid.UUID
		var order int32
		_, err = pgx.ForEachRow(rows, []any{&key, &order}, func() error {
			changes = append(changes, model.Change{Table: table, Kind: model.Delete, Key: key, KeyOrder: order})
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("truncate %s: list rows: %w", table, err)
		}
		if len(changes) == 0 {
			return total, nil
		}
		last := &changes[len(changes)-1]
		after, afterOrder = last.Key, last.KeyOrder
		res, err := w.WriteChanges(ctx, changes)
		if err != nil {
			return total, fmt.Errorf("truncate %s: %w", table, err)
		}
		total.add(res)
	}
}
