package bucketstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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

// db is what every role shares: one pool, the schema, the logger, the
// counters behind Stats and the count of storage server runs behind
// Epoch. The role types embed it, so their methods read s.pool as the
// one Store did before the split.
type db struct {
	pool     *pgxpool.Pool
	schema   string
	log      *slog.Logger
	counters counters
	// runs counts the storage server runs seen (Epoch).
	runs *incarnations
	// layouts, tables and names are what every role knows of the
	// groups' storage layouts (layout.go, names.go): each group's
	// version, its tables' numbers and its buckets' ids.
	layouts layoutCache
	tables  tableNums
	names   *bucketNames
}

// Store is the bucket storage. It opens the pool and migrates the schema;
// the roles are values sharing its pool: Writes, Catalog, Reader, Leases
// and Compactor. It is safe for concurrent use.
type Store struct {
	*db

	writes    *Writes
	catalog   *Catalog
	reader    *Reader
	leases    *Leases
	compactor *Compactor
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
	d := &db{pool: pool, schema: cfg.Schema, log: log, runs: runs, names: newBucketNames()}
	catalog := &Catalog{d}
	writes := &Writes{db: d, changeRetention: defaultChangeRetention, spare: freelist.List[*writeBufs]{Max: maxSpareBufs}}
	return &Store{db: d, writes: writes, catalog: catalog, reader: &Reader{d}, leases: &Leases{db: d},
		compactor: &Compactor{db: d, catalog: catalog}}, nil
}

// Close releases the store's connections.
func (s *Store) Close() {
	s.leases.close()
	s.pool.Close()
}

// Writes is the role replication writes with: the sink of a group,
// writers, the stream's resume position and row data, checkpoints
// (Commit) and the storage counters (Stats).
func (s *Store) Writes() *Writes { return s.writes }

// Catalog is the role that records what is replicated: groups, source
// tables, snapshot ranges and the custom sink pipelines.
func (s *Store) Catalog() *Catalog { return s.catalog }

// Reader is the role the sync API serves from: bucket data, parameter
// rows, checksums, checkpoints and write checkpoints.
func (s *Store) Reader() *Reader { return s.reader }

// Leases is the role that decides which process does what: leases,
// snapshot unit claims, fencing and the storage run (Epoch).
func (s *Store) Leases() *Leases { return s.leases }

// Compactor is the maintenance role: compaction, clearing and
// terminating groups, and storage sizes.
func (s *Store) Compactor() *Compactor { return s.compactor }

// Pool is the store's connection pool, for callers that run their own
// queries against storage (tests, the status command).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// NotifyChannel is the LISTEN/NOTIFY channel new checkpoints are announced on.
func (s *Store) NotifyChannel() string { return s.notifyChannel() }

func (d *db) notifyChannel() string { return d.schema + "_checkpoints" }

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
