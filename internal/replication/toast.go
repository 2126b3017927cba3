package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// An UPDATE that leaves an out-of-line (TOASTed) value unchanged does not
// carry it in pgoutput. The value is merged from the row's previous state:
// big rows of tables with TOASTable columns keep those values in storage
// (stages.Change.RowData → current_data.data), so the merge reads what the
// stream itself last wrote for the row — the state at the previous change,
// exactly what the UPDATE left unchanged.
//
// The writer runs behind the decoder, so the newest state of a row may not
// be in storage yet: toastState keeps the RowData of every change decoded
// but not yet committed, keyed by row, and drops an entry once the batch
// that wrote it (or a later one) has been committed. Lookups go to that
// map first, then to storage, read in one query per batch for all the
// batch's UPDATEs that need it.
//
// A row the size estimate judged too small to be TOASTed has no stored
// values; should the source TOAST it anyway, the value is re-read from the
// source by key as a last resort. That read may see a newer row version,
// which the changes after it in the stream then overwrite.
type toastState struct {
	mu      sync.Mutex
	pending map[bucketstore.RowRef]pendingRow // decoded, not yet committed
	fetched map[bucketstore.RowRef][]byte     // read from storage for this batch
}

type pendingRow struct {
	data []byte // RowData of the row's newest change; nil after a delete
	seq  uint64 // the stream batch holding that change
}

// remember records the RowData of batch seq's new changes as the newest
// state of their rows. Only tables with TOASTable columns are tracked.
func (s *streamer) remember(changes []stages.Change, seq uint64) {
	s.toast.mu.Lock()
	defer s.toast.mu.Unlock()
	for i := range changes {
		c := &changes[i]
		if c.Kind == stages.Truncate || !s.hasToast(c.Table.ID) {
			continue
		}
		if s.toast.pending == nil {
			s.toast.pending = map[bucketstore.RowRef]pendingRow{}
		}
		s.toast.pending[bucketstore.RowRef{Table: c.Table.ID, Key: c.Key}] = pendingRow{data: c.RowData, seq: seq}
	}
}

// hasToast reports whether the table with this storage id has TOASTable
// columns.
func (s *streamer) hasToast(id string) bool {
	t := s.byID[id]
	return t != nil && len(t.layout.spec.Toast) > 0
}

// committed forgets the rows whose newest change is in storage now: batch
// seq and every batch before it are committed.
func (t *toastState) committed(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.pending {
		if p.seq <= seq {
			delete(t.pending, k)
		}
	}
}

// prefetchToast reads from storage, in one query, the stored values of the
// rows whose UPDATEs in lb omit unchanged TOAST values and whose newest
// state is already committed.
func (s *streamer) prefetchToast(ctx context.Context, lb logrepl.Batch) error {
	s.toast.fetched = nil
	var refs []bucketstore.RowRef
	for _, txn := range lb.Txns {
		for i := range txn.Changes {
			c := &txn.Changes[i]
			if c.Kind != logrepl.Update || !hasUnchanged(c.New) {
				continue
			}
			ts := s.byName[c.Relation.Namespace+"."+c.Relation.Name]
			if ts == nil || ts.rel != c.Relation {
				continue // not bound yet (a shape change may come first): the merge reads on its own
			}
			tup := c.New
			if c.OldKind != logrepl.OldNone {
				tup = c.Old
			}
			row, _, err := s.decode(ts, tup)
			if err != nil {
				continue
			}
			ref := bucketstore.RowRef{Table: ts.t.stored.Table.ID, Key: ts.builder.ReplicaID(row)}
			s.toast.mu.Lock()
			_, pending := s.toast.pending[ref]
			s.toast.mu.Unlock()
			if !pending {
				refs = append(refs, ref)
			}
		}
	}
	if len(refs) == 0 {
		return nil
	}
	fetched, err := s.r.store.RowData(ctx, s.g.g.ID, refs)
	if err != nil {
		return fmt.Errorf("merge unchanged TOAST values: %w", err)
	}
	s.toast.fetched = fetched
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
func (s *streamer) mergeToast(ctx context.Context, ts *tableState, prevKey [16]byte, tup logrepl.Tuple, row []syncrules.Value, missing []int) ([]syncrules.Value, error) {
	ref := bucketstore.RowRef{Table: ts.t.stored.Table.ID, Key: prevKey}
	s.toast.mu.Lock()
	p, pending := s.toast.pending[ref]
	s.toast.mu.Unlock()
	data := p.data
	if !pending {
		var ok bool
		if data, ok = s.toast.fetched[ref]; !ok {
			// Not prefetched: committed since the prefetch, or keyed
			// differently before a relation change re-bound the table.
			got, err := s.r.store.RowData(ctx, s.g.g.ID, []bucketstore.RowRef{ref})
			if err != nil {
				return nil, fmt.Errorf("merge unchanged TOAST values: %w", err)
			}
			data = got[ref]
		}
	}
	complete, err := stages.MergeRowData(ts.layout.spec, data, row, missing)
	if err != nil {
		return nil, fmt.Errorf("merge unchanged TOAST values of %s: %w", ts.info.QualifiedName(), err)
	}
	if complete {
		s.r.toastMerged.Add(1)
		return row, nil
	}
	s.r.log.Debug("unchanged TOAST value not in stored row data; re-reading the row from the source",
		"table", ts.info.QualifiedName(), "merged", s.r.toastMerged.Load(), "reread", s.r.toastReread.Add(1))
	return s.refetch(ctx, ts, tup, row)
}

// refetch fills unchanged TOAST values by reading the row from the source:
// the fallback for rows stored without their values. The row is read in
// the catalog's columns and mapped onto the layout's.
func (s *streamer) refetch(ctx context.Context, ts *tableState, tup logrepl.Tuple, row []syncrules.Value) ([]syncrules.Value, error) {
	info := ts.info
	q := "SELECT "
	for i, c := range info.Columns {
		if i > 0 {
			q += ", "
		}
		q += pgx.Identifier{c.Name}.Sanitize() + "::text"
	}
	q += " FROM " + pgx.Identifier{info.Schema, info.Name}.Sanitize() + " WHERE "
	var args []any
	for n, k := range info.KeyColumns {
		if n > 0 {
			q += " AND "
		}
		j := ts.layout.fromCatalog[k]
		if j < 0 || j >= len(tup.Columns) {
			return row, nil // the key is not in the stream's shape: a re-shape follows
		}
		args = append(args, string(tup.Columns[j].Data))
		q += fmt.Sprintf("%s = $%d::%s", pgx.Identifier{info.Columns[k].Name}.Sanitize(), len(args), info.Columns[k].TypeName)
	}
	vals := make([]*string, len(info.Columns))
	dst := make([]any, len(vals))
	for i := range vals {
		dst[i] = &vals[i]
	}
	if err := s.side.QueryRow(ctx, q, args...).Scan(dst...); errors.Is(err, pgx.ErrNoRows) {
		return row, nil // deleted since: a later change removes it
	} else if err != nil {
		return nil, fmt.Errorf("re-read %s for unchanged TOAST values: %w", info.QualifiedName(), err)
	}
	for i, v := range vals {
		j := ts.layout.fromCatalog[i]
		if j < 0 {
			continue
		}
		if v == nil {
			row[j] = syncrules.Null()
			continue
		}
		dv, err := postgres.DecodeText(info.Columns[i], []byte(*v))
		if err != nil {
			return nil, err
		}
		row[j] = dv
	}
	return row, nil
}
