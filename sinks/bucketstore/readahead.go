package bucketstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"

	"github.com/syncpipe/syncpipe/model"
)

// Prepared is a stream batch's stored row state read ahead of its write
// (StreamWriter.Prepare), while the batch before it is being written.
//
// Why: reading a row's stored state is an index probe per row, about half
// of what storage spends on a stream change, and the single stream writer
// is the stream's busiest stage. Read ahead, on a connection of its own,
// the probe overlaps the previous batch's write instead of adding to it.
//
// The state read is exact for every row no write has touched since the
// read began. The writes that have are known to the writer (they are its
// own: a group's stream has one writer, see streamLockClass), so its write
// reads those rows again, inside its transaction.
type Prepared struct {
	seq   uint64 // the writer's completed writes when the read began
	final []*model.Change
	byRow []int32
	prev  prevState
	probe []any // loadPrevious's arguments (layout.probeArgs)
	// parts are the slices' states (readSlices), merged into prev.
	parts []prevState
}

// readAhead is how a write uses a Prepared: the state it read, and which
// of its rows (stale) or whether all of them a later write may have
// changed.
type readAhead struct {
	p     *Prepared
	stale []int32
	all   bool
}

// written is what one completed stream write changed, for judging the
// state read ahead of later writes.
type written struct {
	seq   uint64
	rows  []writtenRow // in collapse order
	every bool         // it may have changed any row (a TRUNCATE)
}

// writtenKept is how many completed writes a StreamWriter remembers; a
// Prepared older than that is read again in full (never in practice: a
// stream has a few batches in flight).
const writtenKept = 16

// Prepare reads the stored state of changes' rows for a later Write of the
// same changes. It returns nil, reading nothing, for a batch with nothing
// to read and for one the write must read itself (one with a TRUNCATE).
// Safe to call concurrently with Write (that is its purpose), not with
// another Prepare.
func (sw *StreamWriter) Prepare(ctx context.Context, changes []model.Change) (*Prepared, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	if slices.ContainsFunc(changes, isTruncate) {
		return nil, nil
	}
	p, ok := sw.prepared.Get()
	if !ok {
		p = &Prepared{}
	}
	p.seq = sw.done.Load() // before the read: a later write is judged stale
	p.final, p.byRow = collapse(p.final, p.byRow, changes)
	lay, err := sw.s.layout(ctx, sw.group)
	if err != nil {
		return nil, err
	}
	ids, keys, orders := probeRows(p.final, probedRow)
	p.prev.reset(len(p.final))
	conn, err := sw.s.acquire(ctx, sw.fence.Epoch, "read stored row state")
	if err != nil {
		return nil, err
	}
	tables, err := sw.s.tableArg(ctx, conn, lay, sw.group, ids)
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("read stored state of %d rows: %w", len(p.final), err)
	}
	p.probe = lay.probeArgs(sw.group, tables, keys, orders)
	if err := sw.readSlices(ctx, conn, p, lay, tables, keys, orders); err != nil {
		return nil, fmt.Errorf("read stored state of %d rows: %w", len(p.final), err)
	}
	return p, nil
}

// Reading a batch's stored state in slices, each on a connection of its
// own, at once. Why: PostgreSQL reads a page it does not hold with one
// synchronous read, so one probe statement waits for its misses one after
// the other — at 10M todos, with the current rows' key and heap larger
// than shared_buffers, a 1k-row transaction's probe spent 35 µs a row
// waiting (scale benchmark, pg_stat_statements) against 8 µs with every
// page held. Slices overlap their waits, and with pages held use more
// than one core. The slices are contiguous runs of the batch in collapse
// order, so each walks its own part of the key.
const (
	// probeSlices bounds the connections one read ahead uses.
	probeSlices = 4
	// probeSliceRows is the least rows of a slice: below it a statement's
	// round trip costs more than the overlap saves.
	probeSliceRows = 256
)

// readSlices reads p's rows into p.prev: on conn alone for a small batch,
// else in slices on conn and connections acquired for them, released as
// each is read.
func (sw *StreamWriter) readSlices(ctx context.Context, conn *pgxpool.Conn, p *Prepared, lay *layout, tables any, keys []pgtype.UUID, orders []int32) error {
	read := func(ctx context.Context, c *pgxpool.Conn, args []any, into *prevState) error {
		defer c.Release()
		rows, err := c.Query(ctx, lay.loadPrevious, args...)
		if err != nil {
			return err
		}
		return scanPrevious(rows, into, lay)
	}
	n := len(p.final)
	k := min(sw.slices, n/probeSliceRows)
	if k <= 1 {
		return read(ctx, conn, p.probe, &p.prev)
	}
	if len(p.parts) < k {
		p.parts = append(p.parts, make([]prevState, k-len(p.parts))...)
	}
	g := pool.New().WithContext(ctx)
	for i := range k {
		lo, hi := i*n/k, (i+1)*n/k
		part := &p.parts[i]
		part.reset(hi - lo)
		args := lay.probeArgs(sw.group, sliceArg(tables, lo, hi), keys[lo:hi], orders[lo:hi])
		g.Go(func(ctx context.Context) error {
			c := conn
			if i > 0 {
				var err error
				if c, err = sw.s.acquire(ctx, sw.fence.Epoch, "read stored row state"); err != nil {
					return err
				}
			}
			return read(ctx, c, args, part)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i := range k {
		p.prev.append(i*n/k, &p.parts[i])
	}
	return nil
}

// sliceArg is rows [lo, hi) of a probe's table argument: db.tableArg's
// table numbers (v2, v3) or ids (v1).
func sliceArg(tables any, lo, hi int) any {
	if nums, ok := tables.([]int32); ok {
		return nums[lo:hi]
	}
	return tables.([]string)[lo:hi]
}

// stale returns the positions of p's rows that a write completed since p
// was read may have changed, or all when it cannot tell.
func (sw *StreamWriter) stale(p *Prepared) (pos []int32, all bool) {
	done := sw.done.Load()
	if sw.broken || done-p.seq > uint64(len(sw.history)) {
		return nil, true
	}
	for i := range sw.history {
		h := &sw.history[i]
		if h.seq <= p.seq || h.seq > done {
			continue
		}
		if h.every {
			return nil, true
		}
		pos = appendCommon(pos, p.final, h.rows)
	}
	// A row written twice since is read again once.
	slices.Sort(pos)
	return slices.Compact(pos), false
}

// appendCommon appends the positions of the rows of final that rows also
// holds: both are in collapse order, so one merge walk finds them.
func appendCommon(pos []int32, final []*model.Change, rows []writtenRow) []int32 {
	i, j := 0, 0
	for i < len(final) && j < len(rows) {
		r := &rows[j]
		c := cmp.Or(strings.Compare(final[i].Table.ID, r.table), cmp.Compare(final[i].KeyOrder, r.order))
		if c == 0 {
			c = bytes.Compare(final[i].Key[:], r.key[:])
		}
		switch {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			pos = append(pos, int32(i))
			i++
			j++
		}
	}
	return pos
}

// writtenRow is a row a completed write changed, ordered as collapse
// orders changes (compareRow): by table id, key order and key.
type writtenRow struct {
	table string
	order int32
	key   [16]byte
}

// remember records a completed write of final (every: it may have
// changed any row) as the writer's next.
func (sw *StreamWriter) remember(final []*model.Change, every bool) {
	seq := sw.done.Load() + 1
	h := &sw.history[seq%writtenKept]
	h.seq, h.every, h.rows = seq, every, h.rows[:0]
	for _, c := range final {
		h.rows = append(h.rows, writtenRow{c.Table.ID, c.KeyOrder, c.Key})
	}
	sw.done.Store(seq)
}

// release gives p's memory back for another Prepare.
func (sw *StreamWriter) release(p *Prepared) {
	p.prev.trim(keptBufBytes(len(p.final)))
	for i := range p.parts {
		p.parts[i].trim(keptBufBytes(len(p.final)))
	}
	clear(p.final)
	p.final, p.probe = p.final[:0], nil
	sw.prepared.Put(p)
}

// probeSubset returns probeRows of the rows of final at pos.
func probeSubset(final []*model.Change, pos []int32) ([]string, []pgtype.UUID, []int32) {
	return probeRows(pos, func(i int32) (string, [16]byte, int32) { return probedRow(final[i]) })
}
