package bucketstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// groupTables are the shared tables that hold a group's data, each with a
// group_id column: what GroupBytes apportions. A v2 group's ops and
// current rows are partitions of its own, measured exactly.
var groupTables = []string{"bucket_data", "current_data", "bucket_parameters"}

// groupBytesPages is how many pages of a table GroupBytes reads at most
// (2,560 pages of 8 KiB: 20 MiB): a smaller table is read whole, a larger
// one sampled, so that a metrics scrape costs about the same however
// large storage grows.
const groupBytesPages = 2560

// GroupBytes estimates the on-disk bytes of bucket storage each group's
// data takes: the total size of bucket_data, current_data and
// bucket_parameters (heap, indexes and TOAST: pg_total_relation_size)
// apportioned to the groups by their share of each table's row bytes
// (pg_column_size of the rows). A table of up to about 20 MiB is read
// whole; of a larger one about that much is read, a random sample of its
// pages (TABLESAMPLE SYSTEM), so the figures are an estimate that varies
// a little from call to call. Groups without rows (or none in a sample)
// are absent. Space deleted rows leave is apportioned as the live rows
// are until vacuum reuses it. The partitions of a group of storage
// version 2 or later are its alone: their sizes are added as they are.
func (s *Compactor) GroupBytes(ctx context.Context) (map[int]int64, error) {
	return s.groupBytes(ctx, groupBytesPages)
}

// groupBytes is GroupBytes reading at most about limit pages of a table
// (tests lower it to sample a small table).
func (s *Compactor) groupBytes(ctx context.Context, limit int64) (map[int]int64, error) {
	total, pages, err := s.tableSizes(ctx)
	if err != nil {
		return nil, err
	}
	shares, err := s.groupRowBytes(ctx, pages, limit)
	if err != nil {
		return nil, err
	}
	out, err := s.partitionBytes(ctx)
	if err != nil {
		return nil, err
	}
	for i, byGroup := range shares {
		var sum int64
		for _, n := range byGroup {
			sum += n
		}
		if sum == 0 {
			continue // an empty table (or sample): nothing to apportion by
		}
		for g, n := range byGroup {
			// In floating point: total × n overflows int64 on a large table.
			out[g] += int64(float64(total[i]) * float64(n) / float64(sum))
		}
	}
	return out, nil
}

// partitionBytes reads the total size of each v2 or v3 group's partitions.
func (s *Compactor) partitionBytes(ctx context.Context) (map[int]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname::text, pg_total_relation_size(c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent IN ('bucket_data2'::regclass, 'current_data2'::regclass, 'current_data3'::regclass) AND pg_relation_size(c.oid) > 0`)
	if err != nil {
		return nil, fmt.Errorf("read the partition sizes of bucket storage: %w", err)
	}
	out := map[int]int64{}
	var name string
	var size int64
	_, err = pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		_, g, ok := strings.Cut(name, "_g")
		id, err := strconv.Atoi(g)
		if !ok || err != nil {
			return fmt.Errorf("partition %q is not named for a group", name)
		}
		out[id] += size
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the partition sizes of bucket storage: %w", err)
	}
	return out, nil
}

// tableSizes reads the total size in bytes and the heap pages of each of
// groupTables, from file sizes (cheap, exact, unlike pg_class's figures
// which only (auto)vacuum and ANALYZE update).
func (s *Compactor) tableSizes(ctx context.Context) (total, pages []int64, err error) {
	rows, err := s.pool.Query(ctx, `SELECT pg_total_relation_size(t::regclass),
		pg_relation_size(t::regclass) / current_setting('block_size')::bigint
		FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i) ORDER BY i`, groupTables)
	if err != nil {
		return nil, nil, fmt.Errorf("read bucket storage table sizes: %w", err)
	}
	for rows.Next() {
		var t, p int64
		if err := rows.Scan(&t, &p); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("read bucket storage table sizes: %w", err)
		}
		total, pages = append(total, t), append(pages, p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read bucket storage table sizes: %w", err)
	}
	return total, pages, nil
}

// groupRowBytes sums the row bytes of each group in each of groupTables
// (by index), over a sample of about limit pages of a table with more, in
// one statement.
func (s *Compactor) groupRowBytes(ctx context.Context, pages []int64, limit int64) ([]map[int]int64, error) {
	var q strings.Builder
	args := make([]any, len(groupTables))
	for i, t := range groupTables {
		if i > 0 {
			q.WriteString("\nUNION ALL\n")
		}
		fmt.Fprintf(&q, `SELECT %d, group_id, sum(pg_column_size(t.*))::bigint FROM %s AS t TABLESAMPLE SYSTEM ($%d) GROUP BY group_id`,
			i, pgx.Identifier{t}.Sanitize(), i+1)
		args[i] = samplePercent(pages[i], limit)
	}
	rows, err := s.pool.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("read the row bytes of each group: %w", err)
	}
	out := make([]map[int]int64, len(groupTables))
	for i := range out {
		out[i] = map[int]int64{}
	}
	for rows.Next() {
		var i, g int
		var n int64
		if err := rows.Scan(&i, &g, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the row bytes of each group: %w", err)
		}
		out[i][g] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the row bytes of each group: %w", err)
	}
	return out, nil
}

// samplePercent is the TABLESAMPLE SYSTEM percentage that reads about
// limit of a table's pages: 100 (every page) up to limit pages.
func samplePercent(pages, limit int64) float64 {
	if pages <= limit {
		return 100
	}
	return 100 * float64(limit) / float64(pages)
}
