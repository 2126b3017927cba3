package bucketstore

import (
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/freelist"
)

// The roles of bucket storage (see "Roles" in doc.go). Each is a concrete
// type with the methods of its role only, sharing the Store's pool; a
// consumer declares the few methods it calls as an interface of its own.

// Writes is the write role: the Sink of a group (sink.go), Writers
// (writer.go), the stream's StreamWriter, StreamResume and RowData
// (stream.go, rowdata.go), checkpoint publication (Commit, checkpoint.go)
// and the storage counters (Stats). Store.Writes returns it.
type Writes struct {
	*db
	// changeRetention is how many op ids of change records Commit keeps
	// (changerecords.go); tests lower it. pruneNext: per group, the
	// horizon at which pruning is next worth a statement.
	changeRetention int64
	pruneNext       sync.Map
	// spare keeps encode buffers from batch to batch (maxSpareBufs).
	spare freelist.List[*writeBufs]
}

// Catalog records what is replicated: groups and their lifecycle, source
// tables, snapshot ranges and progress, and the custom sink pipelines'
// records. Store.Catalog returns it.
type Catalog struct{ *db }

// Reader is what the sync API serves from: bucket data, parameter rows,
// checksums and change records, published checkpoints (ActiveCheckpoint,
// WatchCheckpoints), the compaction floor and write checkpoints. Every
// answer is at a published checkpoint. Store.Reader returns it.
type Reader struct{ *db }

// Leases coordinates processes: leases, snapshot unit claims, fencing
// (CheckFence) and the storage server run a write is fenced with (Epoch).
// It holds the lease session leases are tied to (leases.go). Store.Leases
// returns it.
type Leases struct {
	*db
	// live is the session leases are tied to (liveSession).
	liveMu sync.Mutex
	live   *pgxpool.Conn
	liveID sessionID
}

// Compactor maintains storage: compaction, clearing and terminating
// groups, and what storage holds (Size, GroupBytes). Store.Compactor
// returns it.
type Compactor struct {
	*db
	// catalog: Compact reads the group, Terminate sets its state.
	catalog *Catalog
}

// close ends the lease session, so that the leases it holds are free
// for other processes at once (Store.Close).
func (s *Leases) close() {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.live != nil {
		s.dropLiveLocked()
	}
}
