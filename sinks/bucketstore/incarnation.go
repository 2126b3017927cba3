package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrStorageRestarted fails a write whose caller read its state (a range's
// progress, the stream position) from a storage server that has since
// restarted: with synchronous_commit=off, the last commits before a crash
// may be gone, and a write on top of that state would skip what they
// held. The caller starts again from what storage holds now.
var ErrStorageRestarted = errors.New("storage restarted since this work read its progress: commits not yet flushed may be gone, so it resumes from what storage holds")

// incarnationSQL identifies the storage server's run: the postmaster's
// start time changes when the server is restarted, and the shared
// statistics are reset after crash recovery, which a postmaster does
// without restarting when one backend crashes. (A stats reset by hand
// counts as a restart too; it costs one resume.)
const incarnationSQL = `SELECT pg_postmaster_start_time()::text || ' ' || coalesce((SELECT stats_reset::text FROM pg_stat_archiver), '')`

// incarnations counts the storage server runs a Store has connected to.
// Every new connection reports the run it reached (pgxpool's
// AfterConnect), so a write that took a connection and then finds the
// count unchanged knows its connection reaches the run it read from: a
// connection to an older run fails on use.
type incarnations struct {
	mu   sync.Mutex
	last string
	n    atomic.Uint64
}

// afterConnect is the pool's AfterConnect hook.
func (in *incarnations) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	var id string
	if err := conn.QueryRow(ctx, incarnationSQL).Scan(&id); err != nil {
		return fmt.Errorf("identify the storage server's run: %w", err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if id != in.last {
		in.last = id
		in.n.Add(1)
	}
	return nil
}

// Epoch is the storage server run this store connects to now, a number
// that grows with every restart it notices. A caller reads it before it
// reads its progress and puts it in the Fence of its writes (Fence.Epoch):
// they then fail with ErrStorageRestarted once storage has restarted.
func (s *Leases) Epoch() uint64 { return s.runs.n.Load() }

// acquire takes a connection for a write fenced with epoch (0: any run).
func (s *db) acquire(ctx context.Context, epoch uint64, what string) (*pgxpool.Conn, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: acquire storage connection: %w", what, err)
	}
	if epoch != 0 && s.runs.n.Load() != epoch {
		conn.Release()
		return nil, fmt.Errorf("%s: %w", what, ErrStorageRestarted)
	}
	return conn, nil
}

// durableBegin starts a transaction whose commit waits for its WAL flush
// whatever storage.synchronous_commit says (in the BEGIN's round trip:
// pgx sends an argument-less statement as a simple query). Marks that a
// process counts on once they committed — a range or table done, a plan —
// use it: a storage crash must not take them back behind its back.
const durableBegin = "BEGIN; SET LOCAL synchronous_commit = on"

// durably runs f in a transaction begun with durableBegin on conn.
func durably(ctx context.Context, conn interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, f func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{BeginQuery: durableBegin}, f)
}
