package benchmarks

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the scale scenario reads of storage itself: its size on disk, and
// the blocks its relations read from outside shared buffers (buffer
// misses: from the OS page cache or the disk), from the cumulative
// statistics of the storage database — pg_statio_user_tables, whose
// idx_blks_read adds up pg_statio_user_indexes — and, where
// pg_stat_statements is preloaded, the shared_blks_read of the storage
// database's statements.

// relationSize is one relation of the storage schema.
type relationSize struct {
	name  string
	kind  string // table (heap, TOAST and maps) or index
	bytes int64
}

// storageSize is the size of every relation in the syncpipe schema —
// pg_total_relation_size of each table: heap, TOAST, maps and indexes —
// and the largest tables and indexes on their own.
func storageSize(ctx context.Context, conn *pgx.Conn) (int64, []relationSize, error) {
	var total int64
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'syncpipe' AND c.relkind IN ('r', 'm')`).Scan(&total)
	if err != nil {
		return 0, nil, fmt.Errorf("storage size: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT c.relname, CASE WHEN c.relkind = 'i' THEN 'index' ELSE 'table' END,
			CASE WHEN c.relkind = 'i' THEN pg_relation_size(c.oid) ELSE pg_table_size(c.oid) END AS bytes
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'syncpipe' AND c.relkind IN ('r', 'm', 'i')
		ORDER BY bytes DESC, c.relname LIMIT 6`)
	if err != nil {
		return 0, nil, fmt.Errorf("storage size: %w", err)
	}
	top, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relationSize, error) {
		var s relationSize
		return s, r.Scan(&s.name, &s.kind, &s.bytes)
	})
	if err != nil {
		return 0, nil, fmt.Errorf("storage size: %w", err)
	}
	return total, top, nil
}

// storageReads waits until no session of syncpipe's is left in t's storage
// database — a backend reports its statistics when it exits, after the
// child that used it — and returns the storage database's buffer misses so
// far and its statements' shared_blks_read (-1 without stmts).
func storageReads(ctx context.Context, t *streamTarget, stmts *pgx.Conn) (misses, sharedRead int64, err error) {
	if err := backendsGone(ctx, t.storage); err != nil {
		return 0, 0, err
	}
	err = t.storage.QueryRow(ctx, `SELECT coalesce(sum(coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0)
			+ coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0)), 0)::bigint
		FROM pg_statio_user_tables`).Scan(&misses)
	if err != nil {
		return 0, 0, fmt.Errorf("read pg_statio_user_tables: %w", err)
	}
	sharedRead = -1
	if stmts != nil {
		err = stmts.QueryRow(ctx, `SELECT coalesce(sum(s.shared_blks_read), 0)::bigint
			FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`, t.storageDB).Scan(&sharedRead)
		if err != nil {
			return 0, 0, fmt.Errorf("read pg_stat_statements: %w", err)
		}
	}
	return misses, sharedRead, nil
}

// backendsGone polls until conn's database has no client session but
// conn's own (10 s at most: a session that lingers is counted later).
func backendsGone(ctx context.Context, conn *pgx.Conn) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
		if err != nil {
			return fmt.Errorf("wait for storage sessions to end: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
