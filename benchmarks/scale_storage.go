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

// storageIO is a sample of storage's block counters.
type storageIO struct {
	// fetched are the blocks storage's relations read from outside
	// shared buffers (pg_statio_user_tables: heap, index, TOAST and TOAST
	// index, every fork) — and the pages they grew by: PostgreSQL 15
	// counts a page a relation is extended by as read.
	fetched int64
	// blocks is the storage schema's size in blocks.
	blocks int64
	// shared is the storage database's statements' shared_blks_read
	// (-1: not counted), where an extension counts as written instead.
	shared int64
}

// since is what happened between before and io: the buffer misses (blocks
// fetched less the pages the relations grew by, the misses that cost a
// read), the pages they grew by and the statements' shared_blks_read.
func (io storageIO) since(before storageIO) (misses, grown, shared int64) {
	grown = max(io.blocks-before.blocks, 0)
	shared = -1
	if io.shared >= 0 && before.shared >= 0 {
		shared = io.shared - before.shared
	}
	return max(io.fetched-before.fetched-grown, 0), grown, shared
}

// storageReads waits until no session of syncpipe's is left in t's storage
// database — a backend reports its statistics when it exits, after the
// child that used it — and samples storage's block counters, the
// statements' with stmts (nil: not counted).
func storageReads(ctx context.Context, t *streamTarget, stmts *pgx.Conn) (storageIO, error) {
	io := storageIO{shared: -1}
	if err := backendsGone(ctx, t.storage); err != nil {
		return io, err
	}
	err := t.storage.QueryRow(ctx, `SELECT
			(SELECT coalesce(sum(coalesce(heap_blks_read, 0) + coalesce(idx_blks_read, 0) + coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0)), 0)
			 FROM pg_statio_user_tables)::bigint,
			(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) / current_setting('block_size')::bigint
			 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE n.nspname = 'syncpipe' AND c.relkind IN ('r', 'm'))::bigint`).Scan(&io.fetched, &io.blocks)
	if err != nil {
		return io, fmt.Errorf("read storage's block counters: %w", err)
	}
	if stmts != nil {
		err = stmts.QueryRow(ctx, `SELECT coalesce(sum(s.shared_blks_read), 0)::bigint
			FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`, t.storageDB).Scan(&io.shared)
		if err != nil {
			return io, fmt.Errorf("read pg_stat_statements: %w", err)
		}
	}
	return io, nil
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
