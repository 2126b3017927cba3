package bucketstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
)

// SourceTable is a replicated table of a group as storage records it.
type SourceTable struct {
	model.Table
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
func (s *Catalog) SourceTables(ctx context.Context, group int) ([]SourceTable, error) {
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

// RegisterTable returns the group's record of a source table, creating it
// (with a new stable id) the first time the table is seen.
func (s *Catalog) RegisterTable(ctx context.Context, group int, relationID uint32, schema, name string, replicaIDColumns []string) (SourceTable, error) {
	ts, err := s.RegisterTables(ctx, group, []TableRegistration{{RelationID: relationID, Schema: schema, Name: name, ReplicaIDColumns: replicaIDColumns}})
	if err != nil {
		return SourceTable{}, err
	}
	return ts[0], nil
}

// TableRegistration is one table for RegisterTables.
type TableRegistration struct {
	RelationID       uint32
	Schema, Name     string
	ReplicaIDColumns []string
	// Shape is recorded as the table's shape unless one is already: a
	// table registered by a version that kept no shapes gets the source's
	// shape at its next start. Empty: none.
	Shape []byte
}

// RegisterTables is RegisterTable for many tables at once, recording each
// one's shape, in one transaction of three statements however many tables
// there are: every process registers every table of the rules at its
// start, and hundreds of tables must not cost a round trip or two each.
// The records are returned in the order of regs. Tables are inserted in
// name order, so processes registering overlapping sets at once wait for
// each other instead of deadlocking.
func (s *Catalog) RegisterTables(ctx context.Context, group int, regs []TableRegistration) ([]SourceTable, error) {
	n := len(regs)
	ids, rels, schemas, names := make([]string, n), make([]uint32, n), make([]string, n), make([]string, n)
	rids, shapes := make([]string, n), make([]string, n)
	for i, r := range regs {
		rid, err := json.Marshal(r.ReplicaIDColumns)
		if err != nil {
			return nil, fmt.Errorf("register %d tables in group %d: %w", n, group, err)
		}
		ids[i], rels[i], schemas[i], names[i], rids[i], shapes[i] = randomHex(12), r.RelationID, r.Schema, r.Name, string(rid), string(r.Shape)
	}
	var out []SourceTable
	// Durable: the process writes under these ids from now on.
	err := durably(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO source_tables (id, group_id, relation_id, schema_name, table_name, replica_id_columns, shape)
			SELECT u.id, $1, u.rel, u.nsp, u.name, ARRAY(SELECT jsonb_array_elements_text(u.rid)), nullif(u.shape, '')::jsonb
			FROM unnest($2::text[], $3::oid[], $4::text[], $5::text[], $6::jsonb[], $7::text[]) AS u(id, rel, nsp, name, rid, shape)
			ORDER BY u.nsp, u.name
			ON CONFLICT (group_id, schema_name, table_name) DO NOTHING`, group, ids, rels, schemas, names, rids, shapes); err != nil {
			return err
		}
		// A table stored by a version that kept no shapes gets one now.
		if _, err := tx.Exec(ctx, `
			UPDATE source_tables t SET shape = u.shape::jsonb
			FROM unnest($2::text[], $3::text[], $4::text[]) AS u(nsp, name, shape)
			WHERE t.group_id = $1 AND t.schema_name = u.nsp AND t.table_name = u.name AND t.shape IS NULL AND u.shape <> ''`,
			group, schemas, names, shapes); err != nil {
			return err
		}
		// sourceTableColumns are source_tables' alone: none is a column of u.
		rows, err := tx.Query(ctx, `SELECT `+sourceTableColumns+` FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS u(nsp, name, ord)
			JOIN source_tables t ON t.group_id = $1 AND t.schema_name = u.nsp AND t.table_name = u.name
			ORDER BY u.ord`, group, schemas, names)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SourceTable, error) { return scanSourceTable(r, group) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register %d tables in group %d: %w", n, group, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("register %d tables in group %d: %d stored (a table named twice?)", n, group, len(out))
	}
	return out, nil
}

// MarkTableSnapshotDone records that a table's snapshot is complete and
// raises the group's no_checkpoint_before to lsn, the source position after
// the table's last snapshot read.
func (s *Catalog) MarkTableSnapshotDone(ctx context.Context, tableID string, lsn pglogrepl.LSN) error {
	err := durably(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
		WITH t AS (UPDATE source_tables SET snapshot_done = true, snapshot_lsn = $2::pg_lsn WHERE id = $1 RETURNING group_id)
		UPDATE groups g SET no_checkpoint_before = GREATEST(coalesce(g.no_checkpoint_before, '0/0'), $2::pg_lsn), updated_at = now()
		FROM t WHERE g.id = t.group_id`, tableID, lsn.String())
		return err
	})
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
func (s *Catalog) SnapshotProgress(ctx context.Context) ([]TableProgress, error) {
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
func (s *Catalog) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read storage clock: %w", err)
	}
	return now, nil
}
