package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClearOptions tunes Clear and Terminate.
type ClearOptions struct {
	// BatchSize is the number of rows deleted per statement (default 10000).
	BatchSize int
	// OnBatch, if set, is called after every committed delete statement
	// with the table and the rows it deleted.
	OnBatch func(table string, rows int64)
	// DropTimeout bounds each statement of Terminate's partition drop,
	// which waits for locks and for the transactions that may still use
	// the partition (default dropTimeout; see dropPartition).
	DropTimeout time.Duration
}

// ClearStats reports what Clear deleted.
type ClearStats struct {
	Batches int
	Rows    int64
}

// clearTable is a table Clear empties of a group's rows: those where
// holds, with $1 the group.
type clearTable struct{ name, where string }

// clearTables are emptied in this order; source_tables goes last because
// snapshot_ranges refer to it. A terminated group publishes no checkpoint
// any more, so its op id claims — one a writer cut off mid-write may have
// left behind — hold nothing back and go too.
var clearTables = []clearTable{
	{"op_reservations", "group_id = $1"},
	{"bucket_data", "group_id = $1"},
	{"bucket_parameters", "group_id = $1"},
	{"bucket_changes", "group_id = $1"},
	{"current_data", "group_id = $1"},
	{"snapshot_ranges", "source_table_id IN (SELECT id FROM source_tables WHERE group_id = $1)"},
	{"source_tables", "group_id = $1"},
}

// retireTables are what Terminate empties: clearTables, then the group's
// bucket names, which only Terminate deletes (see Terminate).
var retireTables = append(slices.Clip(clearTables), clearTable{"bucket_names", "group_id = $1"})

// Clear deletes everything stored for a group in bounded batches, each its
// own short transaction, so that clearing millions of ops never holds one
// giant transaction or lock. A group of storage version 2 or 3 has its ops and
// current rows in partitions of its own, which are emptied at once
// (TRUNCATE) instead; its bucket names stay, as every process's cache
// holds their ids and the group is written again (see doc.go, "Storage
// versions"). It can be cancelled through ctx at any point and resumed by
// calling it again. The group row itself is kept, reset to "nothing
// replicated"; its change records start again after the current op id, so
// no reader trusts records of the ops being deleted.
func (s *Compactor) Clear(ctx context.Context, group int, opts ClearOptions) (ClearStats, error) {
	return s.clear(ctx, group, opts, false)
}

// Terminate marks a group TERMINATED (so nothing serves or replicates it
// again) and removes its data for good. It clears the group as Clear
// does, except for a group of storage version 2 or 3: its partitions are
// detached and dropped rather than emptied (dropPartition: without a
// lock that stops other groups' reads and writes), and its bucket names
// are deleted in batches, as nothing resolves them any more; group ids
// come from a sequence, so no later group has its id or finds its names
// in a cache. Like Clear it can be interrupted — a drop that waits
// longer than opts.DropTimeout fails it — and is finished by calling it
// again; on a group it finished, it does nothing.
func (s *Compactor) Terminate(ctx context.Context, group int, opts ClearOptions) (ClearStats, error) {
	if err := s.catalog.SetState(ctx, group, StateTerminated); err != nil {
		return ClearStats{}, err
	}
	return s.clear(ctx, group, opts, true)
}

// clear is Clear, and with retire Terminate's clearing.
func (s *Compactor) clear(ctx context.Context, group int, opts ClearOptions, retire bool) (ClearStats, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = 10000
	}
	var st ClearStats
	lay, err := s.layout(ctx, group)
	if err != nil {
		return st, fmt.Errorf("clear group %d: %w", group, err)
	}
	_, err = s.pool.Exec(ctx, `UPDATE groups SET snapshot_done = false, snapshot_lsn = NULL, last_checkpoint = NULL,
		last_checkpoint_lsn = NULL, no_checkpoint_before = NULL, keepalive_op = NULL, updated_at = now(),
		changes_from = `+lastIssuedSQL+` WHERE id = $1`, group)
	if err != nil {
		return st, fmt.Errorf("clear group %d: reset: %w", group, err)
	}
	tables := clearTables
	if retire {
		tables = retireTables
	}
	for _, t := range tables {
		if lay.interned && (t.name == "bucket_data" || t.name == "current_data") {
			ops, cur := lay.partitions(group)
			parent, part := lay.ops, ops
			if t.name == "current_data" {
				parent, part = lay.cur, cur
			}
			if retire {
				err = s.dropPartition(ctx, parent, part, opts.DropTimeout)
			} else if _, err = s.pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{part}.Sanitize()); err != nil {
				err = fmt.Errorf("truncate %s: %w", part, err)
			}
			if err != nil {
				return st, fmt.Errorf("clear group %d: %w", group, err)
			}
			st.Batches++
			continue
		}
		if err := s.deleteBatches(ctx, group, t, opts, &st); err != nil {
			return st, fmt.Errorf("clear group %d: %w", group, err)
		}
	}
	return st, nil
}

// deleteBatches deletes group's rows of t, at most opts.BatchSize per
// statement, each statement its own transaction, counting them in st.
func (s *Compactor) deleteBatches(ctx context.Context, group int, t clearTable, opts ClearOptions, st *ClearStats) error {
	// A TID scan over a bounded ctid list: each statement touches at
	// most BatchSize rows.
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE %[2]s LIMIT $2))`,
		pgx.Identifier{t.name}.Sanitize(), t.where)
	for {
		tag, err := s.pool.Exec(ctx, q, group, opts.BatchSize)
		if err != nil {
			return fmt.Errorf("delete from %s: %w", t.name, err)
		}
		n := tag.RowsAffected()
		if n == 0 {
			return nil
		}
		st.Batches++
		st.Rows += n
		if opts.OnBatch != nil {
			opts.OnBatch(t.name, n)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
