package bucketstore

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/stages"
)

// SourceTable is a replicated table of a group as storage records it.
type SourceTable struct {
	stages.Table
	RelationID       uint32
	ReplicaIDColumns []string
	SnapshotDone     bool
	EstimatedRows    int64
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
