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
	lsn  uint64 // end LSN of the batch holding that change
}

// remember records the RowData of a batch's new changes as the newest
// state of their rows. Only tables with TOASTable columns are tracked.
func (s *streamer) remember(changes []stages.Change, lsn uint64) {
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
		s.toast.pending[bucketstore.RowRef{Table: c.Table.ID, Key: c.Key}] = pendingRow{data: c.RowData, lsn: lsn}
	}
}

// hasToast reports whether the table with this storage id has TOASTable
// columns.
func (s *streamer) hasToast(id string) bool {
	t := s.byID[id]
	return t != nil && len(t.spec.Toast) > 0
}

// committed forgets the rows whose newest change is in storage now.
func (t *toastState) committed(lsn uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.pending {
		if p.lsn <= lsn {
			delete(t.pending, k)
		}
	}
}

// decode turns a tuple into a row in the table's column order. It returns
// the indexes of columns the tuple left out as unchanged TOAST values
// (NULL in row until merged).
func (s *streamer) decode(st *streamTable, tup logrepl.Tuple) ([]syncrules.Value, []int, error) {
	row := make([]syncrules.Value, len(st.t.info.Columns))
	var missing []int
	for i, col := range tup.Columns {
		j := st.cols[i]
		switch col.Kind {
		case logrepl.ColText:
			v, err := postgres.DecodeText(st.t.info.Columns[j], col.Data)
			if err != nil {
				return nil, nil, fmt.Errorf("decode %s.%s: %w", st.t.info.QualifiedName(), st.t.info.Columns[j].Name, err)
			}
			row[j] = v
		case logrepl.ColUnchanged:
			missing = append(missing, j)
		}
	}
	return row, missing, nil
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
			st, err := s.table(c.Relation)
			if err != nil || st == nil {
				continue // a relation change ahead re-binds it; merge reads on its own
			}
			tup := c.New
			if c.OldKind != logrepl.OldNone {
				tup = c.Old
			}
			row, _, err := s.decode(st, tup)
			if err != nil {
				continue
			}
			ref := bucketstore.RowRef{Table: st.t.stored.Table.ID, Key: st.builder.ReplicaID(row)}
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
func (s *streamer) mergeToast(ctx context.Context, st *streamTable, prevKey [16]byte, tup logrepl.Tuple, row []syncrules.Value, missing []int) ([]syncrules.Value, error) {
	ref := bucketstore.RowRef{Table: st.t.stored.Table.ID, Key: prevKey}
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
	complete, err := stages.MergeRowData(st.t.spec, data, row, missing)
	if err != nil {
		return nil, fmt.Errorf("merge unchanged TOAST values of %s: %w", st.t.info.QualifiedName(), err)
	}
	if complete {
		s.r.toastMerged.Add(1)
		return row, nil
	}
	s.r.log.Debug("unchanged TOAST value not in stored row data; re-reading the row from the source",
		"table", st.t.info.QualifiedName(), "merged", s.r.toastMerged.Load(), "reread", s.r.toastReread.Add(1))
	return s.refetch(ctx, st, tup, row)
}

// refetch fills unchanged TOAST values by reading the row from the source:
// the fallback for rows stored without their values.
func (s *streamer) refetch(ctx context.Context, st *streamTable, tup logrepl.Tuple, row []syncrules.Value) ([]syncrules.Value, error) {
	info := st.t.info
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
		args = append(args, string(tupleValue(st, tup, k)))
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
		if v == nil {
			row[i] = syncrules.Null()
			continue
		}
		dv, err := postgres.DecodeText(info.Columns[i], []byte(*v))
		if err != nil {
			return nil, err
		}
		row[i] = dv
	}
	return row, nil
}

func tupleValue(st *streamTable, tup logrepl.Tuple, col int) []byte {
	for i, j := range st.cols {
		if j == col && i < len(tup.Columns) {
			return tup.Columns[i].Data
		}
	}
	return nil
}
