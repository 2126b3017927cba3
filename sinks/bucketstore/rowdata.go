package bucketstore

import (
	"context"
	"fmt"
)

// RowRef names one replicated source row of a group: its table (the
// model.Table ID), replica id and key order (model.Change.KeyOrder: a v3
// group finds the row by it).
type RowRef struct {
	Table    string
	Key      [16]byte
	KeyOrder int32
}

// RowData returns the stored row data (model.Change.RowData, written with
// the row's current state) of the given rows of group, in one query. Rows
// that are not stored, or were stored without data, are absent from the
// result. The stream uses it to merge the unchanged TOAST values an UPDATE
// omits; it sees every committed write, so callers must themselves keep
// track of rows whose newer state is still on its way to storage.
func (s *Writes) RowData(ctx context.Context, group int, rows []RowRef) (map[RowRef][]byte, error) {
	out := make(map[RowRef][]byte, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	lay, err := s.layout(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("read stored row data of %d rows: %w", len(rows), err)
	}
	ids, keys, orders := probeRows(rows, func(r RowRef) (string, [16]byte, int32) { return r.Table, r.Key, r.KeyOrder })
	tables, err := s.tableArg(ctx, s.pool, lay, group, ids)
	if err != nil {
		return nil, fmt.Errorf("read stored row data of %d rows: %w", len(rows), err)
	}
	res, err := s.pool.Query(ctx, lay.rowData, lay.probeArgs(group, tables, keys, orders)...)
	if err != nil {
		return nil, fmt.Errorf("read stored row data of %d rows: %w", len(rows), err)
	}
	defer res.Close()
	for res.Next() {
		var i int64
		var data []byte
		if err := res.Scan(&i, &data); err != nil {
			return nil, fmt.Errorf("read stored row data: %w", err)
		}
		if i < 1 || int(i) > len(rows) {
			return nil, fmt.Errorf("read stored row data: row number %d out of range", i)
		}
		out[rows[i-1]] = data
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("read stored row data: %w", err)
	}
	return out, nil
}
