package replication

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// The assembly's view of storage: the methods it calls, so that what it
// depends on is visible here and not the whole of *bucketstore.Store.

// groupStorage is what the bucketstore assembly (groups, snapshot units,
// the stream, retirement) needs of storage.
type groupStorage interface {
	EnsureGroup(ctx context.Context, rules, slotPrefix string) ([]bucketstore.Group, error)
	Group(ctx context.Context, id int) (bucketstore.Group, error)
	Groups(ctx context.Context) ([]bucketstore.Group, error)
	SetState(ctx context.Context, id int, state bucketstore.State) error
	ReplaceGroup(ctx context.Context, old bucketstore.Group, slotPrefix string) (g bucketstore.Group, created bool, err error)
	Terminate(ctx context.Context, group int, opts bucketstore.ClearOptions) (bucketstore.ClearStats, error)
	Compact(ctx context.Context, group int, o bucketstore.CompactOptions) (bucketstore.CompactStats, error)
	ReportError(ctx context.Context, id int, msg string) error
	ClearError(ctx context.Context, id int) error
	SetRulesWarnings(ctx context.Context, rules string, warnings []string) error

	RegisterTables(ctx context.Context, group int, regs []bucketstore.TableRegistration) ([]bucketstore.SourceTable, error)
	SourceTables(ctx context.Context, group int) ([]bucketstore.SourceTable, error)
	PlanRanges(ctx context.Context, tableID string, ranges []bucketstore.KeyRange) ([]bucketstore.RangeState, error)
	StoredRanges(ctx context.Context, tableIDs []string) (map[string][]bucketstore.RangeState, error)
	SnapshotStarted(ctx context.Context, group int) (bool, error)
	MarkTableSnapshotDone(ctx context.Context, tableID string, lsn pglogrepl.LSN) error
	MarkSnapshotDone(ctx context.Context, id int, lsn pglogrepl.LSN) error
	FencedSink(group int, f bucketstore.Fence) *bucketstore.Sink

	AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (l bucketstore.Lease, ok bool, err error)
	RenewLease(ctx context.Context, l bucketstore.Lease, ttl time.Duration) error
	ReleaseLease(ctx context.Context, l bucketstore.Lease) error
	CheckFence(ctx context.Context, f bucketstore.Fence) error
	claimStore

	StreamResume(ctx context.Context, group int) (p bucketstore.StreamProgress, ok bool, err error)
	Epoch() uint64
	RowData(ctx context.Context, group int, rows []bucketstore.RowRef) (map[bucketstore.RowRef][]byte, error)
}

// SinkStorage is what a SinkRunner needs of storage: its pipeline's
// stored version, plan and errors. *bucketstore.Store implements it.
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
	_ groupStorage = (*bucketstore.Store)(nil)
	_ SinkStorage  = (*bucketstore.Store)(nil)
)
