package bucketstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncpipe/syncpipe/stages"
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

// previous is a row's stored state before the batch.
type previous struct {
	tid     pgtype.TID // where the row is, to delete it without an index probe
	buckets []string
	lookups [][]byte
	data    []byte
}

// same reports whether c leaves the stored row as it is: same bucket
// memberships, lookups and row data. Most updates only change the data of
// the ops (a todo completed), so their current row need not be rewritten.
func (p *previous) same(c *stages.Change) bool {
	if c.Kind != stages.Upsert || len(p.buckets) != len(c.Puts) || len(p.lookups) != len(c.Lookups) ||
		!bytes.Equal(p.data, c.RowData) {
		return false
	}
	for _, m := range p.buckets {
		if !hasPut(c.Puts, m) {
			return false
		}
	}
	for _, lk := range p.lookups {
		if !hasLookup(c.Lookups, lk) {
			return false
		}
	}
	return true
}

// WriteChanges persists streamed changes of any tables. For every row it
// writes a PUT in each bucket the row is in now and a REMOVE in each bucket
// it was in before and is not any more (from the stored previous
// membership), retracts parameter lookups the row no longer produces, and
// replaces the row's stored state. Several changes of one row in a batch
// collapse to the last: storage only ever shows batch boundaries.
func (w *Writer) WriteChanges(ctx context.Context, changes []stages.Change) (Result, error) {
	return w.writeChanges(ctx, changes, nil)
}

// writeChanges is WriteChanges recording p, when set, in the same
// transaction as the ops (see WriteStream).
func (w *Writer) writeChanges(ctx context.Context, changes []stages.Change, p *StreamProgress) (Result, error) {
	start := time.Now()
	final := collapse(changes)
	var res Result
	tables, keys := probeArgs(final, func(c *stages.Change) (string, [16]byte) { return c.Table.ID, c.Key })
	var prev map[rowKey]previous
	head := func(b *pgx.Batch) {
		b.Queue("SELECT pg_advisory_xact_lock($1, $2)", streamLockClass, w.group)
		prev = make(map[rowKey]previous, len(final))
		b.Queue(loadPreviousSQL, w.group, tables, keys).Query(func(rows pgx.Rows) error { return scanPrevious(rows, prev) })
		w.queueAllocate(b, estimateIDs(final))
	}
	err := w.write(ctx, head, func(tx pgx.Tx, tail *pgx.Batch) error {
		res = Result{}
		if err := w.replaceCurrent(ctx, tx, final, prev); err != nil {
			return err
		}
		need := 0
		for _, c := range final {
			p := prev[rowKey{c.Table.ID, c.Key}]
			need += len(c.Puts) + len(c.Lookups) + len(p.buckets) + len(p.lookups)
		}
		// need over-counts (kept buckets get no REMOVE); unused ids are gaps.
		if err := w.allocate(ctx, tx, need); err != nil {
			return err
		}
		w.ops.reset()
		w.params.reset()
		w.changed.reset(true)
		next := 0
		take := func() int64 { id := w.ids[next]; next++; return id }
		// Every REMOVE of the batch precedes every PUT: a row whose replica
		// id changed (a key update, or any update under REPLICA IDENTITY
		// FULL) leaves its object under the old id and enters it under the
		// new one, and the client, which knows objects by type and id, must
		// see the PUT last whatever order the two ids sort in.
		for _, c := range final {
			p := prev[rowKey{c.Table.ID, c.Key}]
			for _, m := range p.buckets {
				if !hasPut(c.Puts, m) {
					bucket, typ, id := splitMember(m)
					w.subkey = checksum.AppendSubkey(w.subkey[:0], c.Table.ID, uuid.UUID(c.Key))
					w.encodeRemove(c, bucket, typ, id, checksum.Remove(string(w.subkey)), take(), &res)
				}
			}
		}
		for _, c := range final {
			p := prev[rowKey{c.Table.ID, c.Key}]
			res.Rows++
			for j := range c.Puts {
				w.encodePut(c, &c.Puts[j], take(), &res)
			}
			for _, lk := range p.lookups {
				if !hasLookup(c.Lookups, lk) {
					w.encodeParam(c, lk, emptyParams, take(), &res)
				}
			}
			for j := range c.Lookups {
				w.encodeParam(c, c.Lookups[j].Key, c.Lookups[j].Params, take(), &res)
			}
		}
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

// collapse keeps the last change per row, ordered by (table id, key): the
// previous-state probes and current row writes then walk the primary key
// in order.
func collapse(changes []stages.Change) []*stages.Change {
	last := make(map[rowKey]int, len(changes))
	for i := range changes {
		last[rowKey{changes[i].Table.ID, changes[i].Key}] = i
	}
	final := make([]*stages.Change, 0, len(last))
	for _, i := range last {
		final = append(final, &changes[i])
	}
	slices.SortFunc(final, func(a, b *stages.Change) int {
		if c := strings.Compare(a.Table.ID, b.Table.ID); c != 0 {
			return c
		}
		return bytes.Compare(a.Key[:], b.Key[:])
	})
	return final
}

// currentProbe reads the current_data rows of group $1 named by the
// (table, key) pairs in $2 and $3 as c, with k the pair: one primary key
// probe per pair. LATERAL … OFFSET 0 keeps it that way: joined plainly, the
// planner (which guesses the size of unnest) may instead hash every stored
// row of the group and spill to disk, paying for the whole group per batch.
const currentProbe = `
	FROM unnest($2::text[], $3::uuid[]) AS k (t, key)
	CROSS JOIN LATERAL (
		SELECT ctid, buckets, lookups, data FROM current_data
		WHERE group_id = $1 AND source_table = k.t AND source_key = k.key
		OFFSET 0) c`

// loadPreviousSQL reads the stored state of a batch's rows.
const loadPreviousSQL = `SELECT c.ctid, k.t, k.key, c.buckets, c.lookups, c.data` + currentProbe

// probeArgs are currentProbe's $2 and $3 for the rows ref names.
func probeArgs[T any](rows []T, ref func(T) (string, [16]byte)) ([]string, []pgtype.UUID) {
	tables := make([]string, len(rows))
	keys := make([]pgtype.UUID, len(rows))
	for i, r := range rows {
		var k [16]byte
		tables[i], k = ref(r)
		keys[i] = pgtype.UUID{Bytes: k, Valid: true}
	}
	return tables, keys
}

// scanPrevious reads the stored state of a batch's rows (loadPreviousSQL)
// into prev. It takes no row locks: the transaction holds the group's
// stream lock (see streamLockClass), and no other writer changes stored
// rows of a streaming group — snapshot writes only insert, and an insert
// racing ours fails on the primary key and is retried.
func scanPrevious(rows pgx.Rows, prev map[rowKey]previous) error {
	for rows.Next() {
		var k rowKey
		var p previous
		if err := rows.Scan(&p.tid, &k.table, &k.key, &p.buckets, &p.lookups, &p.data); err != nil {
			return fmt.Errorf("load previous row state: %w", err)
		}
		prev[k] = p
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load previous row state: %w", err)
	}
	return nil
}

// estimateIDs guesses, before the rows' stored state is read, how many op
// ids a stream write needs: a row's PUTs and lookups, and as many REMOVEs
// and retractions again for what it had before (a deleted row: two). A
// batch that needs more draws them in a second round trip.
func estimateIDs(final []*stages.Change) int {
	n := 0
	for _, c := range final {
		n += 2 * max(len(c.Puts)+len(c.Lookups), 1)
	}
	return n
}

// replaceCurrent deletes the stored state of rows that had one and writes
// the new state of rows that still exist, leaving rows whose state stays
// the same untouched.
func (w *Writer) replaceCurrent(ctx context.Context, tx pgx.Tx, final []*stages.Change, prev map[rowKey]previous) error {
	var tids []pgtype.TID
	w.cur.reset()
	upserts := 0
	for _, c := range final {
		if p, ok := prev[rowKey{c.Table.ID, c.Key}]; ok {
			if p.same(c) {
				continue
			}
			tids = append(tids, p.tid)
		}
		if c.Kind == stages.Upsert {
			w.encodeCurrent(c)
			upserts++
		}
	}
	if len(tids) > 0 {
		// No other writer changes the group's stored rows while this one holds
		// the stream lock, so the ctids read by loadPrevious still hold.
		if _, err := tx.Exec(ctx, `DELETE FROM current_data WHERE ctid = ANY($1::tid[])`, tids); err != nil {
			return fmt.Errorf("delete previous row state: %w", err)
		}
	}
	if upserts > 0 {
		w.cur.finish()
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, w.cur.reader(), copyCurrentSQL); err != nil {
			return fmt.Errorf("copy current rows: %w", err)
		}
	}
	return nil
}

// hasPut reports whether puts contains the membership element m.
func hasPut(puts []stages.Put, m string) bool {
	for i := range puts {
		p := &puts[i]
		if len(m) == len(p.Bucket)+len(p.ObjectType)+len(p.ObjectID)+2 &&
			strings.HasPrefix(m, p.Bucket) && m[len(p.Bucket)] == memberSep &&
			m[len(p.Bucket)+1:len(p.Bucket)+1+len(p.ObjectType)] == p.ObjectType &&
			m[len(p.Bucket)+1+len(p.ObjectType)] == memberSep &&
			m[len(m)-len(p.ObjectID):] == p.ObjectID {
			return true
		}
	}
	return false
}

func hasLookup(lookups []stages.Lookup, key []byte) bool {
	for i := range lookups {
		if bytes.Equal(lookups[i].Key, key) {
			return true
		}
	}
	return false
}

// splitMember splits a membership element written by copyBuf.elemMember.
func splitMember(m string) (bucket, objectType, objectID string) {
	bucket, rest, _ := strings.Cut(m, string(memberSep))
	objectType, objectID, _ = strings.Cut(rest, string(memberSep))
	return bucket, objectType, objectID
}

// Truncate removes every row of a source table from the group: REMOVEs for
// all its bucket entries and retractions for its lookups, in batches of
// batchSize rows (default 10000), each batch one write.
func (w *Writer) Truncate(ctx context.Context, table *stages.Table, batchSize int) (Result, error) {
	if batchSize <= 0 {
		batchSize = 10000
	}
	var total Result
	var after uuid.UUID
	for {
		rows, err := w.conn.Query(ctx, `SELECT source_key FROM current_data
			WHERE group_id = $1 AND source_table = $2 AND source_key > $3 ORDER BY source_key LIMIT $4`,
			w.group, table.ID, after, batchSize)
		if err != nil {
			return total, fmt.Errorf("truncate %s: list rows: %w", table, err)
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return total, fmt.Errorf("truncate %s: list rows: %w", table, err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		changes := make([]stages.Change, len(keys))
		for i, k := range keys {
			changes[i] = stages.Change{Table: table, Kind: stages.Delete, Key: k}
		}
		res, err := w.WriteChanges(ctx, changes)
		if err != nil {
			return total, fmt.Errorf("truncate %s: %w", table, err)
		}
		total.add(res)
		after = keys[len(keys)-1]
	}
}
