package bucketstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KeyRange is a primary key range of a table, (Lower, Upper]; nil bounds
// are open. Keys are the text forms of the key columns.
type KeyRange struct {
	Lower, Upper []string
}

// RangeState is a planned range and its committed snapshot progress.
type RangeState struct {
	No int
	KeyRange
	LastKey  []string
	RowsDone int64
	Done     bool
}

// PlanRanges stores the split of a table into key ranges the first time it
// is called for the table and returns the stored plan with its progress.
// Later calls return the plan stored first, whatever ranges they pass: a
// resumed snapshot must continue the ranges whose progress it committed,
// even if the table has changed size meanwhile.
func (s *Catalog) PlanRanges(ctx context.Context, tableID string, ranges []KeyRange) ([]RangeState, error) {
	if len(ranges) == 0 {
		ranges = []KeyRange{{}}
	}
	// Durable: units write their progress into the planned rows.
	err := durably(ctx, s.pool, func(tx pgx.Tx) error {
		// Lock the table row so two processes planning at once agree.
		if _, err := tx.Exec(ctx, "SELECT 1 FROM source_tables WHERE id = $1 FOR UPDATE", tableID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM snapshot_ranges WHERE source_table_id = $1", tableID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		for i, r := range ranges {
			if _, err := tx.Exec(ctx, `INSERT INTO snapshot_ranges (source_table_id, range_no, lower_key, upper_key)
				VALUES ($1, $2, $3, $4)`, tableID, i, r.Lower, r.Upper); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("plan snapshot ranges of table %s: %w", tableID, err)
	}
	plans, err := s.StoredRanges(ctx, []string{tableID})
	if err != nil {
		return nil, err
	}
	return plans[tableID], nil
}

// StoredRanges returns the stored range plans (with their progress) of
// the tables that have one, in one statement: a process starting after
// another planned the tables reads the plans instead of planning each
// table again.
func (s *Catalog) StoredRanges(ctx context.Context, tableIDs []string) (map[string][]RangeState, error) {
	rows, err := s.pool.Query(ctx, `SELECT source_table_id, range_no, lower_key, upper_key, last_key, rows_done, done
		FROM snapshot_ranges WHERE source_table_id = ANY($1) ORDER BY source_table_id, range_no`, tableIDs)
	if err != nil {
		return nil, fmt.Errorf("read snapshot ranges of %d tables: %w", len(tableIDs), err)
	}
	plans := map[string][]RangeState{}
	var id string
	var st RangeState
	_, err = pgx.ForEachRow(rows, []any{&id, &st.No, &st.Lower, &st.Upper, &st.LastKey, &st.RowsDone, &st.Done}, func() error {
		plans[id] = append(plans[id], st)
		st = RangeState{} // the next row's key slices must not reuse these
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read snapshot ranges of %d tables: %w", len(tableIDs), err)
	}
	return plans, nil
}
