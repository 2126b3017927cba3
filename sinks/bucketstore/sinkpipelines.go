package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// SinkPipeline is the stored state of a pipeline whose sink is not bucket
// storage (a jsonl file, a sink a Go program registered). Its sink keeps
// the snapshot and stream progress; this keeps what the sink cannot: the
// version, the slot and the snapshot's key range plan.
type SinkPipeline struct {
	Name string
	// Version counts the pipeline's incarnations: a changed sink, table
	// list or sync rules makes a new one, which snapshots afresh.
	Version int
	// Fingerprint identifies what the version was made for.
	Fingerprint string
	SinkType    string
	Tables      []string
	SlotName    string
	// Plan is the snapshot's key ranges per table (JSON, opaque here),
	// fixed once planned so a resumed range keeps its bounds.
	Plan         []byte
	SnapshotDone bool
	// StreamLSN is the last stream position the sink committed, for status.
	StreamLSN   pglogrepl.LSN
	LastError   string
	LastErrorAt *time.Time
	UpdatedAt   time.Time
}

const sinkPipelineCols = `name, version, fingerprint, sink_type, tables, slot_name, plan, snapshot_done,
	coalesce(stream_lsn, '0/0'), coalesce(last_error, ''), last_error_at, updated_at`

func scanSinkPipeline(row pgx.Row) (SinkPipeline, error) {
	var p SinkPipeline
	var lsn string
	err := row.Scan(&p.Name, &p.Version, &p.Fingerprint, &p.SinkType, &p.Tables, &p.SlotName, &p.Plan, &p.SnapshotDone,
		&lsn, &p.LastError, &p.LastErrorAt, &p.UpdatedAt)
	if err != nil {
		return p, err
	}
	p.StreamLSN, err = pglogrepl.ParseLSN(lsn)
	return p, err
}

// SinkPipeline returns the stored state of the named pipeline; ok is false
// when it never ran.
func (s *Catalog) SinkPipeline(ctx context.Context, name string) (p SinkPipeline, ok bool, err error) {
	p, err = scanSinkPipeline(s.pool.QueryRow(ctx, "SELECT "+sinkPipelineCols+" FROM sink_pipelines WHERE name = $1", name))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("read pipeline %s: %w", name, err)
	}
	return p, true, nil
}

// SinkPipelines returns every stored pipeline, by name.
func (s *Catalog) SinkPipelines(ctx context.Context) ([]SinkPipeline, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+sinkPipelineCols+" FROM sink_pipelines ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("read pipelines: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SinkPipeline, error) { return scanSinkPipeline(r) })
	if err != nil {
		return nil, fmt.Errorf("read pipelines: %w", err)
	}
	return out, nil
}

// StartSinkPipelineVersion records a new version of a pipeline: its
// fingerprint, sink, tables and slot, with no plan and no snapshot done.
func (s *Catalog) StartSinkPipelineVersion(ctx context.Context, p SinkPipeline) error {
	_, err := s.pool.Exec(ctx, `
INSERT INTO sink_pipelines (name, version, fingerprint, sink_type, tables, slot_name)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (name) DO UPDATE SET version = $2, fingerprint = $3, sink_type = $4, tables = $5, slot_name = $6,
  plan = NULL, snapshot_done = false, stream_lsn = NULL, last_error = NULL, last_error_at = NULL, updated_at = now()`,
		p.Name, p.Version, p.Fingerprint, p.SinkType, p.Tables, p.SlotName)
	if err != nil {
		return fmt.Errorf("start version %d of pipeline %s: %w", p.Version, p.Name, err)
	}
	return nil
}

// SetSinkPipelinePlan stores the snapshot's key range plan, once: a plan
// already stored is kept and returned, so concurrent planners agree.
func (s *Catalog) SetSinkPipelinePlan(ctx context.Context, name string, plan []byte) ([]byte, error) {
	var stored []byte
	err := s.pool.QueryRow(ctx, `
UPDATE sink_pipelines SET plan = coalesce(plan, $2), updated_at = now() WHERE name = $1 RETURNING plan`, name, plan).Scan(&stored)
	if err != nil {
		return nil, fmt.Errorf("store the snapshot plan of pipeline %s: %w", name, err)
	}
	return stored, nil
}

// MarkSinkPipelineSnapshotDone records that every range of the snapshot is
// committed in the sink.
func (s *Catalog) MarkSinkPipelineSnapshotDone(ctx context.Context, name string) error {
	return s.execSinkPipeline(ctx, name, "UPDATE sink_pipelines SET snapshot_done = true, updated_at = now() WHERE name = $1")
}

// SetSinkPipelineStream records the last stream position the sink
// committed (for status; the sink's own progress is what resumes).
func (s *Catalog) SetSinkPipelineStream(ctx context.Context, name string, lsn pglogrepl.LSN) error {
	return s.execSinkPipeline(ctx, name, "UPDATE sink_pipelines SET stream_lsn = $2, updated_at = now() WHERE name = $1", lsn.String())
}

// ReportSinkPipelineError stores an error that needs an operator.
func (s *Catalog) ReportSinkPipelineError(ctx context.Context, name, msg string) error {
	return s.execSinkPipeline(ctx, name, "UPDATE sink_pipelines SET last_error = $2, last_error_at = now() WHERE name = $1", msg)
}

// ClearSinkPipelineError removes a stored error once the pipeline works.
func (s *Catalog) ClearSinkPipelineError(ctx context.Context, name string) error {
	return s.execSinkPipeline(ctx, name, "UPDATE sink_pipelines SET last_error = NULL, last_error_at = NULL WHERE name = $1 AND last_error IS NOT NULL")
}

func (s *Catalog) execSinkPipeline(ctx context.Context, name, sql string, args ...any) error {
	if _, err := s.pool.Exec(ctx, sql, append([]any{name}, args...)...); err != nil {
		return fmt.Errorf("update pipeline %s: %w", name, err)
	}
	return nil
}
