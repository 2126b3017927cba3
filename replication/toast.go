package replication

import (
	"context"
	"fmt"
	"sync"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
)

// An UPDATE that leaves an out-of-line (TOASTed) value unchanged does not
// carry it in pgoutput. The value is merged from the row's previous state:
// big rows of tables with TOASTable columns keep those values in storage
// (model.Change.RowData → current_data.data), so the merge reads what the
// stream itself last wrote for the row — the state at the previous change,
// exactly what the UPDATE left unchanged.
//
// The writer runs behind the decode stage, so the newest state of a row may
// not be in storage yet: toastState keeps the RowData of every change
// decoded but not yet committed, keyed by row, and drops an entry once the
// batch that wrote it (or a later one) has been committed. That is why the
// bucketstore stream decodes on one goroutine: a change's merge needs the
// change before it of the same row. Lookups go to that
// map first, then to storage, read in one query per batch for all the
// batch's UPDATEs that need it.
//
// A row the size estimate judged too small to be TOASTed has no stored
// values; should the source TOAST it anyway, the value is re-read from the
// source by key as a last resort. That read may see a newer row version,
// which the changes after it in the stream then overwrite.
type toastState struct {
	mu sync.Mutex
	// pending holds, per stream batch decoded but not yet committed and in
	// decode order, the RowData of each of its changes. Remembering is two
	// appends: every change of a table with TOASTable columns is
	// remembered, but only UPDATEs that omit a value look one up, so a
	// batch's index by row is built on its first lookup, not per change.
	pending []*toastBatch
}

// toastBatch is what one stream batch's changes left as rows' newest
// state.
type toastBatch struct {
	seq   uint64
	refs  []bucketstore.RowRef
	data  [][]byte // RowData of refs[i]'s change; nil after a delete
	index map[bucketstore.RowRef]int
}

type pendingRow struct {
	data []byte // RowData of the row's newest change; nil after a delete
	seq  uint64 // the stream batch holding that change
}

// remember records data as the newest state of a row of a table with
// TOASTable columns, decoded in batch seq (nil data: the row is gone).
// Batches are decoded in order, so seq never decreases.
func (t *toastState) remember(spec *stages.TableSpec, key [16]byte, data []byte, seq uint64) {
	if len(spec.Toast) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var b *toastBatch
	if n := len(t.pending); n > 0 && t.pending[n-1].seq == seq {
		b = t.pending[n-1]
	} else {
		b = &toastBatch{seq: seq}
		t.pending = append(t.pending, b)
	}
	b.refs = append(b.refs, bucketstore.RowRef{Table: spec.Table.ID, Key: key})
	b.data = append(b.data, data)
	if b.index != nil {
		b.index[b.refs[len(b.refs)-1]] = len(b.refs) - 1
	}
}

// pendingRow returns the newest remembered state of ref, newest batch
// first.
func (t *toastState) pendingRow(ref bucketstore.RowRef) (pendingRow, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.pending) - 1; i >= 0; i-- {
		b := t.pending[i]
		if b.index == nil {
			b.index = make(map[bucketstore.RowRef]int, len(b.refs))
			for j, r := range b.refs {
				b.index[r] = j
			}
		}
		if j, ok := b.index[ref]; ok {
			return pendingRow{data: b.data[j], seq: b.seq}, true
		}
	}
	return pendingRow{}, false
}

// committed forgets the rows whose newest change is in storage now: batch
// seq and every batch before it are committed.
func (t *toastState) committed(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.pending) && t.pending[n].seq <= seq {
		t.pending[n] = nil
		n++
	}
	t.pending = t.pending[n:]
}

// prefetchToast reads from storage, in one query, the stored values of the
// rows whose UPDATEs in the batch omit unchanged TOAST values and whose
// newest state is already committed.
func (d *streamDecoder) prefetchToast(ctx context.Context, items []rawItem) error {
	d.fetched = nil
	var refs []bucketstore.RowRef
	for i := range items {
		c, lay := items[i].c, items[i].lay
		if c == nil || c.Kind != logrepl.Update || !hasUnchanged(c.New) {
			continue
		}
		tup := c.New
		if c.OldKind != logrepl.OldNone {
			tup = c.Old
		}
		row, _, err := postgres.DecodeTuple(&lay.st, tup)
		if err != nil {
			continue
		}
		ref := bucketstore.RowRef{Table: lay.spec.Table.ID, Key: d.replicaID(lay, row)}
		if _, pending := d.toast.pendingRow(ref); !pending {
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	fetched, err := d.r.store.RowData(ctx, d.group, refs)
	if err != nil {
		return fmt.Errorf("merge unchanged TOAST values: %w", err)
	}
	d.fetched = fetched
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

// mergeToast fills the missing (unchanged TOAST) columns of row from the
// previous state of the row stored under prevKey.
func (d *streamDecoder) mergeToast(ctx context.Context, lay *layout, prevKey [16]byte, tup logrepl.Tuple, row []model.Value, missing []int) ([]model.Value, error) {
	ref := bucketstore.RowRef{Table: lay.spec.Table.ID, Key: prevKey}
	p, pending := d.toast.pendingRow(ref)
	data := p.data
	if !pending {
		var ok bool
		if data, ok = d.fetched[ref]; !ok {
			// Not prefetched: committed since the prefetch, or keyed
			// differently before a relation change re-bound the table.
			got, err := d.r.store.RowData(ctx, d.group, []bucketstore.RowRef{ref})
			if err != nil {
				return nil, fmt.Errorf("merge unchanged TOAST values: %w", err)
			}
			data = got[ref]
		}
	}
	complete, err := stages.MergeRowData(lay.spec, data, row, missing)
	if err != nil {
		return nil, fmt.Errorf("merge unchanged TOAST values of %s: %w", lay.info.QualifiedName(), err)
	}
	if complete {
		d.r.toastMerged.Add(1)
		return row, nil
	}
	d.r.log.Debug("unchanged TOAST value not in stored row data; re-reading the row from the source",
		"table", lay.info.QualifiedName(), "merged", d.r.toastMerged.Load(), "reread", d.r.toastReread.Add(1))
	return d.refetch(ctx, lay, tup, row)
}

// refetch fills unchanged TOAST values by reading the row from the source:
// the fallback for rows stored without their values. The row is read in
// the catalog's columns and mapped onto the layout's.
func (d *streamDecoder) refetch(ctx context.Context, lay *layout, tup logrepl.Tuple, row []model.Value) ([]model.Value, error) {
	info := lay.info
	key := make([]string, len(info.KeyColumns))
	for n, k := range info.KeyColumns {
		j := lay.fromCatalog[k]
		if j < 0 || j >= len(tup.Columns) {
			return row, nil // the key is not in the stream's shape: a re-shape follows
		}
		key[n] = string(tup.Columns[j].Data)
	}
	if d.conn == nil {
		conn, err := d.r.connectSource(ctx)
		if err != nil {
			return nil, err
		}
		d.conn = conn
	}
	cur, ok, err := postgres.ReadRow(ctx, d.conn, info, key)
	if err != nil {
		return nil, fmt.Errorf("re-read %s for unchanged TOAST values: %w", info.QualifiedName(), err)
	}
	if !ok {
		return row, nil // deleted since: a later change removes it
	}
	for i, v := range cur {
		if j := lay.fromCatalog[i]; j >= 0 {
			row[j] = v
		}
	}
	return row, nil
}
