package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// sampling tunes how SplitRanges samples keys.
type sampling struct {
	perRange    int64 // key samples wanted per range
	minPerRange int   // fewer samples per range: read every Nth key instead
}

var defaultSampling = sampling{perRange: 1000, minPerRange: 20}

// splitSeed makes TABLESAMPLE deterministic for a given table state.
const splitSeed = 20240601

// SplitRanges splits a table into key ranges that can be snapshotted in
// parallel. A table with more than splitRows estimated rows gets
// min(maxRanges, ⌈rows/splitRows⌉) ranges, otherwise (or when maxRanges ≤ 1)
// one range covering everything. The ranges are (Lower, Upper], in key
// order, and cover the key space exactly once: the first Lower and the last
// Upper are nil (unbounded). Boundaries are quantiles of the key, sampled
// with TABLESAMPLE SYSTEM … REPEATABLE (or, when that yields too few keys,
// every Nth key in order), so the split is deterministic for a given table
// state. Fewer ranges are returned when the table has too few distinct
// keys. Like the reader, it applies SessionParams to conn's session.
func SplitRanges(ctx context.Context, conn *pgx.Conn, t TableInfo, maxRanges int, splitRows int64) ([]KeyRange, error) {
	return splitRanges(ctx, conn, t, maxRanges, splitRows, defaultSampling)
}

func splitRanges(ctx context.Context, conn *pgx.Conn, t TableInfo, maxRanges int, splitRows int64, sm sampling) ([]KeyRange, error) {
	whole := []KeyRange{{}}
	if maxRanges <= 1 || splitRows <= 0 || t.EstimatedRows <= splitRows || len(t.KeyColumns) == 0 {
		return whole, nil
	}
	n := int((t.EstimatedRows + splitRows - 1) / splitRows)
	n = min(n, maxRanges)
	// Key texts must be produced under the settings the readers parse them
	// with (DateStyle for date keys, for example).
	if err := configureSession(ctx, conn, 0); err != nil {
		return nil, fmt.Errorf("split %s into key ranges: configure session: %w", t.QualifiedName(), err)
	}
	keys, err := sampleKeys(ctx, conn, t, n, sm)
	if err != nil {
		return nil, fmt.Errorf("split %s into key ranges: %w", t.QualifiedName(), err)
	}
	bounds := quantiles(keys, n)
	if len(bounds) == 0 {
		return whole, nil
	}
	ranges := make([]KeyRange, 0, len(bounds)+1)
	var lower []string
	for _, b := range bounds {
		ranges = append(ranges, KeyRange{Lower: lower, Upper: b})
		lower = b
	}
	return append(ranges, KeyRange{Lower: lower}), nil
}

// sampleKeys returns a sorted sample of keys (text forms) for n ranges.
func sampleKeys(ctx context.Context, conn *pgx.Conn, t TableInfo, n int, sm sampling) ([][]string, error) {
	// The text forms are aliased: ORDER BY "k" would otherwise sort by the
	// output column "k" (the text), not the key.
	cols := aliasedKeys(t)
	table := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	order := keyList(t)

	want := sm.perRange * int64(n)
	pct := 100 * float64(want) / float64(max(t.EstimatedRows, 1))
	pct = min(max(pct, 0.0001), 100)
	q := fmt.Sprintf("SELECT %s FROM %s TABLESAMPLE SYSTEM (%s) REPEATABLE (%d) ORDER BY %s",
		cols, table, strconv.FormatFloat(pct, 'f', -1, 64), splitSeed, order)
	keys, err := readKeys(ctx, conn, q, len(t.KeyColumns))
	if err != nil {
		return nil, err
	}
	if len(keys) >= sm.minPerRange*n {
		return keys, nil
	}
	// Too few pages sampled: read every Nth key of the whole index instead.
	every := max(t.EstimatedRows/(sm.perRange*int64(n)), 1)
	q = fmt.Sprintf("SELECT %s FROM (SELECT %s, row_number() OVER (ORDER BY %s) AS syncpipe_rn FROM %s) s WHERE syncpipe_rn %% %d = 0 ORDER BY syncpipe_rn",
		sampledCols(len(t.KeyColumns)), cols, order, table, every)
	return readKeys(ctx, conn, q, len(t.KeyColumns))
}

func aliasedKeys(t TableInfo) string {
	parts := make([]string, len(t.KeyColumns))
	for i, ci := range t.KeyColumns {
		parts[i] = pgx.Identifier{t.Columns[ci].Name}.Sanitize() + "::text AS syncpipe_k" + strconv.Itoa(i)
	}
	return strings.Join(parts, ", ")
}

func sampledCols(nk int) string {
	parts := make([]string, nk)
	for i := range parts {
		parts[i] = "syncpipe_k" + strconv.Itoa(i)
	}
	return strings.Join(parts, ", ")
}

func readKeys(ctx context.Context, conn *pgx.Conn, q string, nk int) ([][]string, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys [][]string
	for rows.Next() {
		vals := rows.RawValues()
		if len(vals) != nk {
			return nil, fmt.Errorf("sample query returned %d columns, want %d", len(vals), nk)
		}
		k := make([]string, nk)
		for i, v := range vals {
			k[i] = string(v)
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// quantiles picks up to n-1 distinct, increasing boundaries from sorted
// keys.
func quantiles(keys [][]string, n int) [][]string {
	var out [][]string
	for i := 1; i < n; i++ {
		idx := i * len(keys) / n
		if idx >= len(keys) {
			break
		}
		k := keys[idx]
		if len(out) > 0 && slices.Equal(out[len(out)-1], k) {
			continue
		}
		out = append(out, k)
	}
	return out
}
