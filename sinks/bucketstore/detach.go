package bucketstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// dropTimeout bounds each statement of a partition's detach and drop
// (statement_timeout: the whole of a wait, however many transactions it
// waits for): past it Terminate fails, and the retire that called it
// retries later, rather than waiting on a long reader for good. While
// it waits the detach holds only SHARE UPDATE EXCLUSIVE on the parent,
// which stops no read or write of another group, only another group's
// creation (ATTACH PARTITION) for that long.
const dropTimeout = 10 * time.Second

// pendingDetachSQL lists the partitions of parent ($1) whose detach was
// interrupted, and partition $2 if it is attached, with whether its
// detach is pending.
const pendingDetachSQL = `SELECT c.relname::text, i.inhdetachpending FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = $1::regclass AND (i.inhdetachpending OR i.inhrelid = to_regclass($2))`

// dropPartition detaches part from parent and drops it, without taking a
// lock on parent that stops other groups' reads and writes: a plain
// DETACH PARTITION or a DROP of an attached partition takes ACCESS
// EXCLUSIVE on parent, which queues behind any open transaction that
// read parent (an API stream of any group) and then stops every later
// statement on parent behind it. DETACH PARTITION … CONCURRENTLY takes
// SHARE UPDATE EXCLUSIVE on parent, marks the partition "detach pending"
// (from then on new queries leave it out), waits for the transactions
// that may still use it, and only then locks the partition alone. Once
// detached, nothing plans with the table, so dropping it waits for
// nobody. No TRUNCATE first: it takes ACCESS EXCLUSIVE on the partition,
// which PostgreSQL's generic plans of statements on parent lock along
// with every other partition, so it would queue behind a long reader of
// any group the same way and stop the others' statements behind it.
//
// Each step can be interrupted (a statement past timeout, ctx): a
// cancelled DETACH … CONCURRENTLY leaves the partition detach pending,
// which the next call finishes with DETACH … FINALIZE; a partition
// already detached is only dropped, one already dropped is done. A
// parent can have one partition detach pending at a time, so one another
// group's interrupted retire left is finished first, here (its drop is
// left to its own retire).
func (s *Compactor) dropPartition(ctx context.Context, parent, part string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = dropTimeout
	}
	parentID, partID := pgx.Identifier{parent}.Sanitize(), pgx.Identifier{part}.Sanitize()
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("drop partition %s: %w", part, err)
	}
	defer c.Release()
	if _, err := c.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", max(timeout.Milliseconds(), 1))); err != nil {
		return fmt.Errorf("drop partition %s: %w", part, err)
	}
	defer func() {
		// The connection goes back to the pool with the session's own
		// statement_timeout, or not at all.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if _, rerr := c.Exec(rctx, "RESET statement_timeout"); rerr != nil {
			_ = c.Conn().Close(rctx) // Release then discards it
		}
	}()
	rows, err := c.Query(ctx, pendingDetachSQL, parentID, partID)
	if err != nil {
		return fmt.Errorf("drop partition %s: read its state: %w", part, err)
	}
	var name string
	var pending bool
	var finalize []string
	attached := false
	_, err = pgx.ForEachRow(rows, []any{&name, &pending}, func() error {
		if pending {
			finalize = append(finalize, name)
		} else {
			attached = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("drop partition %s: read its state: %w", part, err)
	}
	for _, p := range finalize {
		if _, err := c.Exec(ctx, "ALTER TABLE "+parentID+" DETACH PARTITION "+pgx.Identifier{p}.Sanitize()+" FINALIZE"); err != nil {
			return fmt.Errorf("finish the interrupted detach of partition %s: %w", p, err)
		}
	}
	if attached {
		// Never in a transaction block: Exec without arguments sends it
		// alone, in the simple protocol.
		if _, err := c.Exec(ctx, "ALTER TABLE "+parentID+" DETACH PARTITION "+partID+" CONCURRENTLY"); err != nil {
			return fmt.Errorf("detach partition %s: %w", part, err)
		}
	}
	if _, err := c.Exec(ctx, "DROP TABLE IF EXISTS "+partID); err != nil {
		return fmt.Errorf("drop partition %s: %w", part, err)
	}
	return nil
}
