package bucketstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// batchTx is a transaction sent in as few round trips as its statements'
// dependencies allow: BEGIN goes with the statements head queues, body
// runs what needs their results, and the statements body queues on tail
// go together just before the COMMIT.
//
// Why: a write's statements are cheap for storage (a stream write of a few
// hundred rows executes in about 15 ms), but each round trip waits for the
// backend and then the Go side to be scheduled again, which on a busy
// machine costs milliseconds; a stream write used to spend four times its
// statement time in its fourteen round trips.
type batchTx struct {
	// head queues statements to run right after BEGIN; nil queues none.
	// Their callbacks (pgx.QueuedQuery) have run when body starts.
	head func(b *pgx.Batch)
	// body runs in the transaction and may queue statements on tail.
	body func(tx pgx.Tx, tail *pgx.Batch) error
	// beforeCommit, when set, runs after tail was executed, just before
	// the commit (a test hook that widens race windows).
	beforeCommit func()
}

// batcher is what batchTx needs of a connection (*pgxpool.Conn, *pgx.Conn).
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// run runs t on conn, rolling back on any error. head and body must be
// safe to run again from scratch (callers retry).
func (t batchTx) run(ctx context.Context, conn batcher) (err error) {
	var b pgx.Batch
	b.BeginTx(pgx.TxOptions{})
	if t.head != nil {
		t.head(&b)
	}
	br := conn.SendBatch(ctx, &b)
	tx := br.Tx()
	defer func() {
		// After a commit, or a batch that failed before BEGIN, the
		// transaction is closed and Rollback reports only that.
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) && err == nil {
			err = rerr
		}
	}()
	if err := br.Close(); err != nil {
		return err
	}
	var tail pgx.Batch
	if t.body != nil {
		if err := t.body(tx, &tail); err != nil {
			return err
		}
	}
	if tail.Len() > 0 {
		if err := tx.SendBatch(ctx, &tail).Close(); err != nil {
			return err
		}
	}
	if t.beforeCommit != nil {
		t.beforeCommit()
	}
	return tx.Commit(ctx)
}
