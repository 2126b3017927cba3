package bucketstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
)

// ErrTooManyParameterResults is returned (wrapped, with the limit) by
// ParameterRows when the lookups of one request match more parameter
// entries than allowed. The sync API reports it to the client as
// PowerSync's PSYNC_S2305 "too many parameter query results".
var ErrTooManyParameterResults = errors.New("too many parameter query results")

// parameterRowsSQL returns the entry in force at a checkpoint for every
// (lookup, source row): the newest at or below it (the lookup index
// (group_id, lookup, id DESC) finds each lookup's versions), dropping
// retractions ('[]', written when a row stops producing a lookup). $4 is
// the caller's limit + 1, or NULL for no limit. Every row, and one
// without an entry (NULL i) when there are none, carries the group's
// state: a takeover's clearing deletes entries row by row (MVCC, never
// TRUNCATE) once the group's stop has committed, so a statement that
// sees the group serving sees none of those deletions.
const parameterRowsSQL = `
SELECT g.state, p.i, p.bucket_parameters FROM groups g LEFT JOIN (
  SELECT p.i, p.bucket_parameters FROM (
    SELECT DISTINCT ON (l.i, bp.source_table, bp.source_key) l.i, bp.bucket_parameters
    FROM unnest($2::bytea[]) WITH ORDINALITY AS l(lookup, i)
    JOIN bucket_parameters bp ON bp.group_id = $1 AND bp.lookup = l.lookup AND bp.id <= $3
    ORDER BY l.i, bp.source_table, bp.source_key, bp.id DESC) p
  WHERE p.bucket_parameters <> '[]'
  LIMIT $4) p ON true
WHERE g.id = $1`

// ParameterRows resolves parameter lookups (syncrules.Lookup.Key) at a
// checkpoint of group, in one query. The result is parallel to lookups:
// result[i] holds, for lookups[i], one stored JSON array of parameter rows
// per source row whose newest entry at or below checkpoint produces that
// lookup (pass each to the lookup's Buckets). A lookup with no entries gets
// an empty list; a lookup repeated in the request gets the same list.
//
// limit bounds the number of entries over all lookups (≤ 0: no bound);
// beyond it the error wraps ErrTooManyParameterResults. For a group that
// no longer serves (taken over: its entries are being cleared) the error
// wraps ErrGroupStopped. The returned slices are the caller's. Safe for concurrent use; checkpoint must be a
// published checkpoint of group for a stable answer.
func (s *Reader) ParameterRows(ctx context.Context, group int, checkpoint int64, lookups [][]byte, limit int) ([][][]byte, error) {
	out := make([][][]byte, len(lookups))
	if len(lookups) == 0 {
		return out, nil
	}
	// Each distinct key is looked up once; positions maps it back.
	index := make(map[string]int, len(lookups))
	var unique [][]byte
	positions := make([][]int, 0, len(lookups))
	for i, k := range lookups {
		j, ok := index[string(k)]
		if !ok {
			j = len(unique)
			index[string(k)] = j
			unique = append(unique, k)
			positions = append(positions, nil)
		}
		positions[j] = append(positions[j], i)
	}
	var bound *int
	if limit > 0 {
		bound = new(int)
		*bound = limit + 1
	}
	s.counters.paramQueries.Add(1)
	rows, err := s.pool.Query(ctx, parameterRowsSQL, group, unique, checkpoint, bound)
	if err != nil {
		return nil, fmt.Errorf("parameter lookups of group %d: %w", group, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var state State
		var i pgtype.Int8
		var params []byte
		if err := rows.Scan(&state, &i, &params); err != nil {
			return nil, fmt.Errorf("parameter lookups of group %d: %w", group, err)
		}
		if !(Group{State: state}).Serving() {
			return nil, fmt.Errorf("parameter lookups of group %d: %w", group, ErrGroupStopped)
		}
		if !i.Valid {
			continue // no entries
		}
		n++
		if limit > 0 && n > limit {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManyParameterResults, limit)
		}
		if i.Int64 < 1 || int(i.Int64) > len(unique) {
			return nil, fmt.Errorf("parameter lookups: lookup number %d out of range", i.Int64)
		}
		for _, p := range positions[i.Int64-1] {
			out[p] = append(out[p], params)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("parameter lookups of group %d: %w", group, err)
	}
	return out, nil
}
