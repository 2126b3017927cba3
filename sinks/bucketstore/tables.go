package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/stages"
)

// SourceTable is a replicated table of a group as storage records it.
type SourceTable struct {
	stages.Table
	RelationID       uint32
	ReplicaIDColumns []string
	SnapshotDone     bool
	EstimatedRows    int64
	// Shape is the table shape the stored rows were made from, as the
	// stream recorded it (opaque to storage); nil until recorded.
	Shape []byte
	// Resnapshot is set while the table is re-read after a shape change.
	Resnapshot *ResnapshotProgress
}

// sourceTableColumns are the columns scanSourceTable reads.
const sourceTableColumns = `id, relation_id, schema_name, table_name, replica_id_columns, snapshot_done, estimated_rows,
	shape::text, resnapshot, resnapshot_key, resnapshot_rows`

func scanSourceTable(row pgx.Row, group int) (SourceTable, error) {
	var t SourceTable
	var shape *string
	var resnap bool
	var rp ResnapshotProgress
	err := row.Scan(&t.ID, &t.RelationID, &t.Schema, &t.Name, &t.ReplicaIDColumns, &t.SnapshotDone, &t.EstimatedRows,
		&shape, &resnap, &rp.LastKey, &rp.Rows)
	if err != nil {
		return t, err
	}
	t.GroupID = group
	if shape != nil {
		t.Shape = []byte(*shape)
	}
	if resnap {
		t.Resnapshot = &rp
	}
	return t, nil
}

// SourceTables returns the group's tables as storage records them.
func (s *Store) SourceTables(ctx context.Context, group int) ([]SourceTable, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+sourceTableColumns+" FROM source_tables WHERE group_id = $1 ORDER BY schema_name, table_name", group)
	if err != nil {
		return nil, fmt.Errorf("read tables of group %d: %w", group, err)
	}
	ts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SourceTable, error) { return scanSourceTable(r, group) })
	if err != nil {
		return nil, fmt.Errorf("read tables of group %d: %w", group, err)
	}
	return ts, nil
}

// InitShape records shape as the table's shape unless one is recorded
// already, and returns the recorded one: a table registered by a version
// that kept no shapes gets the source's shape at its next start.
func (s *Store) InitShape(ctx context.Context, tableID string, shape []byte) ([]byte, error) {
	var stored string
	err := s.pool.QueryRow(ctx, `UPDATE source_tables SET shape = coalesce(shape, $2::jsonb) WHERE id = $1 RETURNING shape::text`,
		tableID, string(shape)).Scan(&stored)
	if err != nil {
		return nil, fmt.Errorf("record the shape of table %s: %w", tableID, err)
	}
	return []byte(stored), nil
}

// RegisterTable returns the group's record of a source table, creating it
// (with a new stable id) the first time the table is seen.
func (s *Store) RegisterTable(ctx context.Context, group int, relationID uint32, schema, name string, replicaIDColumns []string) (SourceTable, error) {
	var t SourceTable
	err := s.pool.QueryRow(ctx, `
		WITH ins AS (
		  INSERT INTO source_tables (id, group_id, relation_id, schema_name, table_name, replica_id_columns)
		  VALUES ($1, $2, $3, $4, $5, $6)
		  ON CONFLICT (group_id, schema_name, table_name) DO NOTHING
		  RETURNING id, relation_id, replica_id_columns, snapshot_done, estimated_rows)
		SELECT * FROM ins
		UNION ALL
		SELECT id, relation_id, replica_id_columns, snapshot_done, estimated_rows FROM source_tables
		WHERE group_id = $2 AND schema_name = $4 AND table_name = $5
		LIMIT 1`, randomHex(12), group, relationID, schema, name, replicaIDColumns).
		Scan(&t.ID, &t.RelationID, &t.ReplicaIDColumns, &t.SnapshotDone, &t.EstimatedRows)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another process registered the table at the same moment: the
		// insert waited for it and did nothing, and the statement's
		// snapshot, taken before, cannot see its row. A new one can.
		err = s.pool.QueryRow(ctx, `SELECT id, relation_id, replica_id_columns, snapshot_done, estimated_rows FROM source_tables
			WHERE group_id = $1 AND schema_name = $2 AND table_name = $3`, group, schema, name).
			Scan(&t.ID, &t.RelationID, &t.ReplicaIDColumns, &t.SnapshotDone, &t.EstimatedRows)
	}
	if err != nil {
		return t, fmt.Errorf("register table %s.%s in group %d: %w", schema, name, group, err)
	}
	t.GroupID, t.Schema, t.Name = group, schema, name
	return t, nil
}

// MarkTableSnapshotDone records that a table's snapshot is complete and
// raises the group's no_checkpoint_before to lsn, the source position after
// the table's last snapshot read.
func (s *Store) MarkTableSnapshotDone(ctx context.Context, tableID string, lsn pglogrepl.LSN) error {
	_, err := s.pool.Exec(ctx, `
		WITH t AS (UPDATE source_tables SET snapshot_done = true, snapshot_lsn = $2::pg_lsn WHERE id = $1 RETURNING group_id)
		UPDATE groups g SET no_checkpoint_before = GREATEST(coalesce(g.no_checkpoint_before, '0/0'), $2::pg_lsn), updated_at = now()
		FROM t WHERE g.id = t.group_id`, tableID, lsn.String())
	if err != nil {
		return fmt.Errorf("mark table %s snapshot done: %w", tableID, err)
	}
	return nil
}

// TableProgress is one table's snapshot progress as storage records it.
type TableProgress struct {
	Group               int
	Table               string // schema.name
	Done                bool
	Ranges, RangesDone  int
	RowsDone, Estimated int64
	Resnapshot          bool  // being re-read after a shape change
	ResnapshotRows      int64 // rows re-read so far
}

// SnapshotProgress returns the progress of every table of every group,
// ordered by group and table.
func (s *Store) SnapshotProgress(ctx context.Context) ([]TableProgress, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT t.group_id, t.schema_name || '.' || t.table_name, t.snapshot_done,
		       count(r.range_no), count(r.range_no) FILTER (WHERE r.done), coalesce(sum(r.rows_done), 0), t.estimated_rows,
		       t.resnapshot, t.resnapshot_rows
		FROM source_tables t LEFT JOIN snapshot_ranges r ON r.source_table_id = t.id
		GROUP BY t.id ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("read snapshot progress: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TableProgress, error) {
		var p TableProgress
		err := r.Scan(&p.Group, &p.Table, &p.Done, &p.Ranges, &p.RangesDone, &p.RowsDone, &p.Estimated, &p.Resnapshot, &p.ResnapshotRows)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read snapshot progress: %w", err)
	}
	return out, nil
}

// Now is storage's clock, which stamps errors and checkpoints.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read storage clock: %w", err)
	}
	return now, nil
}
