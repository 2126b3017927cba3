package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// An UPDATE that leaves an out-of-line (TOASTed) value unchanged does not
// carry it in pgoutput. With DecodeConfig.Rows, the value is merged from
// the row's previous state: a sink that keeps big rows' values
// (model.Change.RowData; bucket storage's current_data.data) holds what
// the stream itself last wrote for the row — the state at the previous
// change, exactly what the UPDATE left unchanged.
//
// The sink's writer runs behind the decode stage, so the newest state of a
// row may not be written yet: rowStates keeps the RowData of every change
// decoded but not yet committed, keyed by row, and drops an entry once the
// batch that wrote it (or a later one) has been committed. That is why
// such a stream decodes on one goroutine: a change's merge needs the
// change before it of the same row. Lookups go to that map first, then to
// the sink, read in one query per batch for all the batch's UPDATEs that
// need it.
//
// A row the size estimate judged too small to be TOASTed has no stored
// values; should the source TOAST it anyway, the value is re-read from the
// source by key as a last resort (decodeWorker.reread).
type rowStates struct {
	mu sync.Mutex
	// pending holds, per stream batch decoded but not yet committed and in
	// decode order, the RowData of each of its changes. Remembering is two
	// appends: every change of a table with TOASTable columns is
	// remembered, but only UPDATEs that omit a value look one up, so a
	// batch's index by row is built on its first lookup, not per change.
	pending []*rowBatch
}

// rowBatch is what one stream batch's changes left as rows' newest state.
type rowBatch struct {
	seq   uint64
	refs  []RowRef
	data  [][]byte // RowData of refs[i]'s change; nil after a delete
	index map[RowRef]int
}

// remember records data as the newest state of a row of a table with
// TOASTable columns, decoded in batch seq (nil data: the row is gone).
// Batches are decoded in order, so seq never decreases.
func (t *rowStates) remember(spec *stages.TableSpec, ref RowRef, data []byte, seq uint64) {
	if len(spec.Toast) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var b *rowBatch
	if n := len(t.pending); n > 0 && t.pending[n-1].seq == seq {
		b = t.pending[n-1]
	} else {
		b = &rowBatch{seq: seq}
		t.pending = append(t.pending, b)
	}
	b.refs = append(b.refs, ref)
	b.data = append(b.data, data)
	if b.index != nil {
		b.index[b.refs[len(b.refs)-1]] = len(b.refs) - 1
	}
}

// pendingRow returns the newest remembered state of ref (nil data: the
// row is gone), newest batch first.
func (t *rowStates) pendingRow(ref RowRef) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.pending) - 1; i >= 0; i-- {
		b := t.pending[i]
		if b.index == nil {
			b.index = make(map[RowRef]int, len(b.refs))
			for j, r := range b.refs {
				b.index[r] = j
			}
		}
		if j, ok := b.index[ref]; ok {
			return b.data[j], true
		}
	}
	return nil, false
}

// committed forgets the rows whose newest change is in the sink now:
// batch seq and every batch before it are committed.
func (t *rowStates) committed(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.pending) && t.pending[n].seq <= seq {
		t.pending[n] = nil
		n++
	}
	t.pending = t.pending[n:]
}

// prefetch reads from the sink, in one query, the stored values of the
// rows whose UPDATEs in the batch omit unchanged TOAST values and whose
// newest state is already committed.
func (w *decodeWorker) prefetch(ctx context.Context, items []StreamItem) error {
	w.fetched = nil
	var refs []RowRef
	for i := range items {
		c, t := items[i].Change, items[i].Table
		if c == nil || c.Kind != logrepl.Update || !hasUnchanged(c.New) {
			continue
		}
		tup := c.New
		if c.OldKind != logrepl.OldNone {
			tup = c.Old
		}
		row, _, err := decodeTuple(t, tup)
		if err != nil {
			continue
		}
		ref := w.rowRef(t, row)
		if _, pending := w.d.rows.pendingRow(ref); !pending {
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	fetched, err := w.d.cfg.Rows.RowData(ctx, refs)
	if err != nil {
		return fmt.Errorf("merge unchanged TOAST values: %w", err)
	}
	w.fetched = fetched
	return nil
}

func hasUnchanged(tup logrepl.Tuple) bool {
	for _, c := range tup.Columns {
		if c.Kind == logrepl.ColUnchanged {
			return true
		}
	}
	return false
}

// merge fills the missing (unchanged TOAST) columns of row from the
// previous state of the row stored as ref.
func (w *decodeWorker) merge(ctx context.Context, t *StreamTable, ref RowRef, tup logrepl.Tuple, row []model.Value, missing []int) ([]model.Value, error) {
	data, pending := w.d.rows.pendingRow(ref)
	if !pending {
		var ok bool
		if data, ok = w.fetched[ref]; !ok {
			// Not prefetched: committed since the prefetch, or keyed
			// differently before a relation change re-bound the table.
			got, err := w.d.cfg.Rows.RowData(ctx, []RowRef{ref})
			if err != nil {
				return nil, fmt.Errorf("merge unchanged TOAST values: %w", err)
			}
			data = got[ref]
		}
	}
	complete, err := stages.MergeRowData(t.Spec, data, row, missing)
	if err != nil {
		return nil, fmt.Errorf("merge unchanged TOAST values of %s: %w", t.Info.QualifiedName(), err)
	}
	if complete {
		count(w.d.cfg.Merged)
		return row, nil
	}
	reread := count(w.d.cfg.Reread)
	if log := w.d.cfg.Log; log != nil {
		log.Debug("unchanged TOAST value not in stored row data; re-reading the row from the source",
			"table", t.Info.QualifiedName(), "reread", reread)
	}
	return w.reread(ctx, t, tup, row)
}

// count adds one to n, if set, and returns its new value.
func count(n *atomic.Int64) int64 {
	if n == nil {
		return 0
	}
	return n.Add(1)
}

// closeConn closes a source connection with bounded I/O.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
