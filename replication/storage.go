package replication

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// The assembly's view of storage. Bucket storage is split by role
// (bucketstore's doc.go); each interface below is the few methods one
// part of the assembly calls, declared here so that what it depends on is
// visible, and claims.go tests claims on a map (claimStore).

// groupWrites is what the write path writes with: the sink of each
// snapshot unit and of the stream (replicator.go, stream.go), the
// stream's resume position (stream.go) and stored row data for merging
// unchanged TOAST values (groupRows): *bucketstore.Writes.
type groupWrites interface {
	FencedSink(group int, f bucketstore.Fence) *bucketstore.Sink
	StreamResume(ctx context.Context, group int) (p bucketstore.StreamProgress, ok bool, err error)
	RowData(ctx context.Context, group int, rows []bucketstore.RowRef) (map[bucketstore.RowRef][]byte, error)
}

// tableCatalog is what the snapshot and the stream read and record of a
// group's tables and snapshot ranges (snapshot.go, streamer.go):
// *bucketstore.Catalog.
type tableCatalog interface {
	SourceTables(ctx context.Context, group int) ([]bucketstore.SourceTable, error)
	PlanRanges(ctx context.Context, tableID string, ranges []bucketstore.KeyRange) ([]bucketstore.RangeState, error)
	StoredRanges(ctx context.Context, tableIDs []string) (map[string][]bucketstore.RangeState, error)
	MarkTableSnapshotDone(ctx context.Context, tableID string, lsn pglogrepl.LSN) error
	MarkSnapshotDone(ctx context.Context, id int, lsn pglogrepl.LSN) error
}

// fenceStore is what fences a unit's writes (stream.go, snapshot.go):
// whether its lease still holds, and the storage run its writes are
// bound to: *bucketstore.Leases.
type fenceStore interface {
	CheckFence(ctx context.Context, f bucketstore.Fence) error
	Epoch() uint64
}

// groupCatalog is what deploying, starting and retiring groups reads and
// records (replicator.go, retire.go, compaction.go; the stream and the
// snapshot read their group with it): *bucketstore.Catalog.
type groupCatalog interface {
	EnsureGroup(ctx context.Context, rules, slotPrefix string) ([]bucketstore.Group, error)
	SetRulesWarnings(ctx context.Context, rules string, warnings []string) error
	Group(ctx context.Context, id int) (bucketstore.Group, error)
	Groups(ctx context.Context) ([]bucketstore.Group, error)
	Retiring(ctx context.Context) ([]bucketstore.Group, error)
	ReplaceGroup(ctx context.Context, old bucketstore.Group, slotPrefix string) (g bucketstore.Group, created bool, err error)
	SetState(ctx context.Context, id int, state bucketstore.State) error
	SnapshotStarted(ctx context.Context, group int) (bool, error)
	RegisterTables(ctx context.Context, group int, regs []bucketstore.TableRegistration) ([]bucketstore.SourceTable, error)
}

// groupErrors stores a group's last error for status and /healthz
// (errors.go): *bucketstore.Catalog.
type groupErrors interface {
	ReportError(ctx context.Context, id int, msg string) error
	ClearError(ctx context.Context, id int) error
}

// leaseStore is what a unit's lease needs (lease.go): *bucketstore.Leases.
type leaseStore interface {
	AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (l bucketstore.Lease, ok bool, err error)
	RenewLease(ctx context.Context, l bucketstore.Lease, ttl time.Duration) error
	ReleaseLease(ctx context.Context, l bucketstore.Lease) error
}

// maintenance is what compacting and retiring groups do to their ops
// (compaction.go, retire.go): *bucketstore.Compactor.
type maintenance interface {
	Compact(ctx context.Context, group int, o bucketstore.CompactOptions) (bucketstore.CompactStats, error)
	Terminate(ctx context.Context, group int, opts bucketstore.ClearOptions) (bucketstore.ClearStats, error)
}

// setStorage hands each part of r the role of st it uses.
func (r *Replicator) setStorage(st *bucketstore.Store) {
	r.writes = st.Writes()
	r.sourceTables = st.Catalog()
	r.fences = st.Leases()
	r.catalog = st.Catalog()
	r.groupErrs = st.Catalog()
	r.leases = st.Leases()
	r.maint = st.Compactor()
}

// SinkStorage is what a SinkRunner needs of storage: its pipeline's
// stored version, plan and errors. *bucketstore.Catalog implements it.
type SinkStorage interface {
	SinkPipeline(ctx context.Context, name string) (p bucketstore.SinkPipeline, ok bool, err error)
	StartSinkPipelineVersion(ctx context.Context, p bucketstore.SinkPipeline) error
	SetSinkPipelinePlan(ctx context.Context, name string, plan []byte) ([]byte, error)
	MarkSinkPipelineSnapshotDone(ctx context.Context, name string) error
	SetSinkPipelineStream(ctx context.Context, name string, lsn pglogrepl.LSN) error
	ReportSinkPipelineError(ctx context.Context, name, msg string) error
	ClearSinkPipelineError(ctx context.Context, name string) error
}

var (
	_ groupCatalog = (*bucketstore.Catalog)(nil)
	_ groupErrors  = (*bucketstore.Catalog)(nil)
	_ leaseStore   = (*bucketstore.Leases)(nil)
	_ claimStore   = (*bucketstore.Leases)(nil)
	_ maintenance  = (*bucketstore.Compactor)(nil)
	_ groupWrites  = (*bucketstore.Writes)(nil)
	_ tableCatalog = (*bucketstore.Catalog)(nil)
	_ fenceStore   = (*bucketstore.Leases)(nil)
	_ SinkStorage  = (*bucketstore.Catalog)(nil)
)
