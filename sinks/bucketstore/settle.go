package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// settleLockClass is the first key of the advisory lock a group's settle
// and the mark of its snapshot done are taken under (settleOnce).
const settleLockClass = 0x5354 // "ST"

// settleLockTimeout bounds how long the covering key's build waits for
// its locks.
const settleLockTimeout = 5 * time.Second

// settleFill is the covering key's leaf fillfactor (PostgreSQL's default
// is 90). After the snapshot its entries change only when a row's
// memberships do or a row comes or goes: a growing source key (a serial
// id) inserts at the key's right edge, which never needs the room, and a
// random one splits a full leaf on its first insert and then has half a
// page. 5 % of every leaf is 3.5 bytes a source row at a todo's size.
const settleFill = 95

// settleSortMB is the build's maintenance_work_mem.
const settleSortMB = 256

// settleStats is what settle did to a group's current rows.
type settleStats struct {
	// settled is false for a layout settle has nothing to do for (v1–v3).
	settled bool
	// rebuilt is false when the key could not be rebuilt (its lock was
	// held).
	rebuilt bool
	// keyBytes is the size of the current rows' primary key afterwards.
	keyBytes int64
	// reindex, vacuum and warm are the time each step took.
	reindex, vacuum, warm time.Duration
}

// settleOnce settles group's current rows (settle) unless its snapshot is
// already marked done, and returns with the group's settle lock held:
// release drops it, once the caller has marked the snapshot done. So a
// second process finishing the same snapshot's last range — or one that
// finds every range done at its start — waits for the first, finds the
// mark and does nothing: a group is never settled while it streams,
// where the key's rebuild would stop the stream's probes.
func (d *db) settleOnce(ctx context.Context, group int) (release func(), err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("settle the current rows of group %d: %w", group, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", settleLockClass, group); err != nil {
		conn.Release()
		return nil, fmt.Errorf("settle the current rows of group %d: take its lock: %w", group, err)
	}
	release = func() {
		// Unlocked with the connection's session if this fails.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, $2)", settleLockClass, group); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}
	var done bool
	err = conn.QueryRow(ctx, "SELECT snapshot_done FROM groups WHERE id = $1", group).Scan(&done)
	if err == nil && !done {
		_, err = d.settle(ctx, group)
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// settle readies a v4 group's current rows for streaming once its initial
// snapshot is written, and before its stream starts (it does nothing for
// other versions):
//
//  1. it replaces the partition's primary key, which the snapshot wrote
//     without the memberships (narrower entries: a cheaper load) and
//     left about 58 % full (see doc.go, "Storage versions"), with one
//     built whole, 90 % full, that INCLUDEs (group_id, members): the key
//     the probe reads alone. The build stops writes to the partition, and
//     to the parent by a generic plan (which locks every partition), for
//     its length; it waits at most settleLockTimeout for its locks and is
//     otherwise skipped — the probe then reads the heap, as version 3's;
//  2. it vacuums the partition, so that the visibility map marks its
//     pages all-visible and the probe is index-only (autovacuum has done
//     most pages during the load; vacuum skips those);
//  3. it reads the whole key once through shared_buffers (an index-only
//     scan of the partition): a rebuilt index is written past the buffer
//     cache, and the stream's first probes would each pay a read.
//
// Each step is safe to run again, so a crash or a retry runs it again.
func (d *db) settle(ctx context.Context, group int) (settleStats, error) {
	l, err := d.layout(ctx, group)
	if err != nil || !l.covering {
		return settleStats{}, err
	}
	_, cur := l.partitions(group)
	part := pgx.Identifier{cur}.Sanitize()
	key := pgx.Identifier{cur + "_pkey"}.Sanitize()
	st := settleStats{settled: true}
	fail := func(step string, err error) (settleStats, error) {
		return st, fmt.Errorf("settle the current rows of group %d: %s: %w", group, step, err)
	}
	start := time.Now()
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var covering bool
		err := tx.QueryRow(ctx, "SELECT indnatts > indnkeyatts FROM pg_index WHERE indexrelid = $1::regclass", key).Scan(&covering)
		if err != nil || covering {
			return err
		}
		// maintenance_work_mem: the build sorts every row's entry (about
		// 600 MB at 10M todos); PostgreSQL's default of 64 MB spills it
		// to disk in runs. This is one session's, for one build.
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d; SET LOCAL maintenance_work_mem = '%dMB'",
			settleLockTimeout.Milliseconds(), settleSortMB)); err != nil {
			return err
		}
		// One transaction: a crash leaves the old key or the new one.
		// USING INDEX renames the new index to the constraint's name.
		cover := pgx.Identifier{cur + "_cover"}.Sanitize()
		_, err = tx.Exec(ctx, fmt.Sprintf(`CREATE UNIQUE INDEX %[1]s ON %[2]s (source_table, key_order, source_key) INCLUDE (group_id, members)
	WITH (fillfactor = %[4]d);
ALTER TABLE %[2]s DROP CONSTRAINT %[3]s, ADD CONSTRAINT %[3]s PRIMARY KEY USING INDEX %[1]s`, cover, part, key, settleFill))
		return err
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
		d.log.Warn("current rows' covering key not built: a lock it needs was held; the stream's probes read the heap",
			"group", group, "waited", settleLockTimeout)
	case err != nil:
		return fail("build the covering key", err)
	default:
		st.rebuilt = true
	}
	st.reindex = time.Since(start)
	start = time.Now()
	if _, err := d.pool.Exec(ctx, "VACUUM "+part); err != nil {
		return fail("vacuum", err)
	}
	st.vacuum = time.Since(start)
	start = time.Now()
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		// The planner would read the heap (a sequential scan, through a
		// ring of a few buffers) to count: steer it to the key.
		if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off"); err != nil {
			return err
		}
		var n int64
		return tx.QueryRow(ctx, "SELECT count(*) FROM "+part).Scan(&n)
	})
	if err != nil {
		return fail("read the key into shared buffers", err)
	}
	st.warm = time.Since(start)
	if err := d.pool.QueryRow(ctx, "SELECT pg_relation_size($1::regclass)", key).Scan(&st.keyBytes); err != nil {
		return fail("size the key", err)
	}
	d.log.Info("current rows settled for streaming", "group", group, "key_bytes", st.keyBytes, "rebuilt", st.rebuilt,
		"reindex", st.reindex.Round(time.Millisecond), "vacuum", st.vacuum.Round(time.Millisecond), "warm", st.warm.Round(time.Millisecond))
	return st, nil
}
