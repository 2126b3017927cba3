package bucketstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/freelist"
	"github.com/syncpipe/syncpipe/internal/pgauth"
)

// Config says where storage lives and how to talk to it.
type Config struct {
	// URI is the storage database's connection string.
	URI string
	// Schema holds all of syncpipe's tables (default "syncpipe").
	Schema string
	// MaxConns bounds the pool (default 8).
	MaxConns int32
	// SynchronousCommit is the storage session's synchronous_commit ("on"
	// or "off"). "off" is safe: acknowledged LSNs are read back from
	// durable records only (see doc.go).
	SynchronousCommit string
	// ConnectTimeout bounds establishing each storage connection (config
	// storage.connect_timeout); 0 = none beyond ctx. Without it a storage
	// host that accepts TCP but never answers stalls Open for as long as
	// ctx allows.
	ConnectTimeout time.Duration
	// Logger receives storage events; nil discards them.
	Logger *slog.Logger
	// NoMigrate opens storage as it is, for commands that only read it
	// (status, compact): Open creates and migrates nothing, and fails with
	// ErrNoSchema when the schema is missing or not at SchemaVersion.
	NoMigrate bool
}

// Store is the bucket storage: write side (groups, writers, checkpoints)
// and read side. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	schema   string
	log      *slog.Logger
	counters counters
	// changeRetention is how many op ids of change records Commit keeps
	// (changerecords.go); tests lower it. pruneNext: per group, the
	// horizon at which pruning is next worth a statement.
	changeRetention int64
	pruneNext       sync.Map
	// live is the session leases are tied to (leases.go, liveSession).
	liveMu sync.Mutex
	live   *pgxpool.Conn
	liveID sessionID
	// spare keeps encode buffers from batch to batch (maxSpareBufs).
	spare freelist.List[*writeBufs]
	// runs counts the storage server runs seen (Epoch).
	runs *incarnations
}

// Open connects to storage and applies pending migrations (with
// NoMigrate: checks that none are pending).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Schema == "" {
		cfg.Schema = "syncpipe"
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 8
	}
	if cfg.SynchronousCommit == "" {
		cfg.SynchronousCommit = "on"
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URI)
	if err != nil {
		return nil, fmt.Errorf("storage uri: %w", err)
	}
	pcfg.MaxConns = cfg.MaxConns
	if cfg.ConnectTimeout > 0 {
		pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = cfg.SynchronousCommit
	pcfg.ConnConfig.RuntimeParams["application_name"] = "syncpipe"
	runs := &incarnations{}
	pcfg.AfterConnect = runs.afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("storage pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if advice := pgauth.Advice(err, "storage.uri"); advice != "" {
			return nil, fmt.Errorf("storage at %s refused the connection: %w: %s", redact(cfg.URI), err, advice)
		}
		return nil, fmt.Errorf("storage unreachable at %s: %w", redact(cfg.URI), err)
	}
	prepare := Migrate
	if cfg.NoMigrate {
		prepare = checkSchema
	}
	if err := prepare(ctx, pool, cfg.Schema); err != nil {
		pool.Close()
		if errors.Is(err, ErrNoSchema) {
			return nil, fmt.Errorf("storage %s %w", redact(cfg.URI), err)
		}
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{pool: pool, schema: cfg.Schema, log: log, changeRetention: defaultChangeRetention,
		spare: freelist.List[*writeBufs]{Max: maxSpareBufs}, runs: runs}, nil
}

// Close releases the store's connections.
func (s *Store) Close() {
	s.liveMu.Lock()
	if s.live != nil {
		s.dropLiveLocked()
	}
	s.liveMu.Unlock()
	s.pool.Close()
}

// Pool is the store's connection pool, for callers that run their own
// queries against storage (tests, the status command).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// NotifyChannel is the LISTEN/NOTIFY channel new checkpoints are announced on.
func (s *Store) NotifyChannel() string { return s.schema + "_checkpoints" }

// redact hides a password in a connection string for error messages.
func redact(uri string) string {
	cfg, err := pgconn.ParseConfig(uri)
	if err != nil || cfg.Password == "" {
		return uri
	}
	return strings.Replace(uri, cfg.Password, "xxxxx", 1)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// isRetryable reports whether err is a serialization failure or deadlock,
// which are safe to retry because the transaction rolled back entirely.
func isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// retry runs f until it succeeds, fails with a non-retryable error, or ctx
// ends. Only whole rolled-back transactions are retried, so committed work
// is never redone.
func retry(ctx context.Context, retries *atomic.Int64, f func() error) error {
	backoff := 5 * time.Millisecond
	for {
		err := f()
		if err == nil || !isRetryable(err) {
			return err
		}
		retries.Add(1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (while retrying: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}
