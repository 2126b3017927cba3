package syncapi

import (
	"context"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// The sync API's view of bucket storage. Bucket storage is split by role
// (bucketstore's doc.go); the server reads groups from the catalog and
// everything else from the reader, and calls only the methods below.
// Declaring them here, where they are used, keeps that dependency
// visible in one file, lets a reader see what serving costs storage, and
// lets tests serve the protocol from an in-memory fake (fake_test.go)
// with no PostgreSQL. The bucketstore role types satisfy the interfaces
// as they are (the assertions at the end of this file).

// Storage is what a Server asks of bucket storage at a checkpoint while
// serving, and its write checkpoints: Config.Store takes it so that the
// server is written against these methods alone.
type Storage interface {
	BucketReader
	WriteCheckpointStore
}

// GroupReader reads replication groups (Config.Groups): a stream needs
// its group's sync rules, and /healthz reports the groups' stored errors.
type GroupReader interface {
	// Group returns one group (its Rules are parsed once per group).
	Group(ctx context.Context, id int) (bucketstore.Group, error)
	// Groups returns every group, for the health check.
	Groups(ctx context.Context) ([]bucketstore.Group, error)
}

// BucketReader reads what a published checkpoint holds: the parameter
// rows that decide a client's buckets, and the buckets' ops. Both are
// only ever asked at a published checkpoint, so answers are stable.
type BucketReader interface {
	// ParameterRows resolves parameter lookups at checkpoint, as
	// bucketstore.Reader.ParameterRows documents (result parallel to
	// lookups; beyond limit entries an error wrapping
	// bucketstore.ErrTooManyParameterResults).
	ParameterRows(ctx context.Context, group int, checkpoint int64, lookups [][]byte, limit int) ([][][]byte, error)
	// ReadBucketDataShape streams the ops after each request's position
	// up to checkpoint, bucket by bucket in request order, at most limit
	// rows, with more as bucketstore.Reader.ReadBucketData documents.
	// shape matters only to the benchmarks (Config.Baseline).
	ReadBucketDataShape(ctx context.Context, shape bucketstore.ReadShape, group int, checkpoint int64,
		reqs []bucketstore.BucketRequest, limit int, fn func(*bucketstore.OpRow) error) (more bool, err error)
	// ReadValidity tells whether the reads of a group that ended before
	// it were complete: how far compaction may have rewritten its ops,
	// and whether it still serves (bucketstore.Reader.ReadValidity).
	ReadValidity(ctx context.Context, group int) (bucketstore.Validity, error)
}

// WriteCheckpointStore keeps write checkpoints: GET /write-checkpoint2.json
// and POST /sync/checkpoint-request create them, and streams report each once a checkpoint's LSN covers it.
type WriteCheckpointStore interface {
	// CreateWriteCheckpoint records one for the client, due at sourceLSN,
	// and returns its number.
	CreateWriteCheckpoint(ctx context.Context, userID, clientID string, sourceLSN pglogrepl.LSN) (int64, error)
	// RequestWriteCheckpoint records one the client numbered (POST
	// /sync/checkpoint-request), due at sourceLSN, and returns the larger
	// of the stored and requested numbers.
	RequestWriteCheckpoint(ctx context.Context, userID, clientID string, requested int64, sourceLSN pglogrepl.LSN) (int64, error)
	// WriteCheckpointFor returns the client's newest write checkpoint
	// covered by checkpointLSN (ok false: none).
	WriteCheckpointFor(ctx context.Context, userID, clientID string, checkpointLSN pglogrepl.LSN) (int64, bool, error)
	// WriteCheckpointsFor is WriteCheckpointFor for many clients at once,
	// so that all streams cost one read per checkpoint (writecp.go).
	WriteCheckpointsFor(ctx context.Context, clients []bucketstore.WriteCheckpointClient, checkpointLSN pglogrepl.LSN) (map[bucketstore.WriteCheckpointClient]int64, error)
}

// ChecksumSource answers bucket checksums at checkpoints for every
// stream; Config.Checksums takes it so that a server not backed by
// PostgreSQL can supply its own. *bucketstore.ChecksumCache is the
// production one: New builds it from Config.Sources by default.
type ChecksumSource interface {
	// Checksums returns the checksum and op count of each bucket at
	// checkpoint, parallel to buckets.
	Checksums(ctx context.Context, group int, checkpoint int64, buckets []string) ([]bucketstore.BucketChecksum, error)
	// Changes returns what may have changed between two checkpoints, so
	// a stream keeps what did not; the zero ChangeSet (everything may
	// have changed) is always a correct answer, only a slower one.
	Changes(ctx context.Context, group int, from, to int64) (bucketstore.ChangeSet, error)
	// Stats returns the counters Server.ChecksumStats reports.
	Stats() bucketstore.ChecksumStats
}

// CheckpointSource delivers the ACTIVE group's newly published
// checkpoints to streams; Config.Checkpoints takes it so that a server
// not backed by PostgreSQL can be driven by its caller.
// *bucketstore.CheckpointWatcher is the production one: New starts it
// from Config.Sources by default.
type CheckpointSource interface {
	// Subscribe returns a channel holding at most the newest checkpoint
	// (a newer one replaces an unread one), closed when ctx ends or the
	// source stops, as bucketstore.CheckpointWatcher.Subscribe documents.
	Subscribe(ctx context.Context) <-chan bucketstore.Checkpoint
}

// Sources builds the production checksum cache and checkpoint watcher
// (Config.Sources), so that New owns them: it sizes the cache, switches
// it for the change records baseline, and Close waits for the watcher.
// *bucketstore.Reader is one. A server given Config.Checksums and
// Config.Checkpoints (a fake) needs none.
type Sources interface {
	NewChecksumCache(size int) *bucketstore.ChecksumCache
	WatchCheckpoints(ctx context.Context) *bucketstore.CheckpointWatcher
}

// The production types satisfy the interfaces above: a change to a
// bucketstore signature fails the build here, not at a distant call site.
var (
	_ GroupReader      = (*bucketstore.Catalog)(nil)
	_ Storage          = (*bucketstore.Reader)(nil)
	_ Sources          = (*bucketstore.Reader)(nil)
	_ ChecksumSource   = (*bucketstore.ChecksumCache)(nil)
	_ CheckpointSource = (*bucketstore.CheckpointWatcher)(nil)
)
