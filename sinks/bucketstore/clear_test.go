package bucketstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestClearLargeGroupInBatchesCancelAndResume clears a group of storage
// version 1 of 1M ops in bounded batches, cancels part-way, and resumes to
// completion. (A v2 group's partitions are emptied at once:
// TestLayoutClear.)
func TestClearLargeGroupInBatchesCancelAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1M rows")
	}
	t.Parallel()
	ctx := context.Background()
	s, g := openStoreV1(t)
	other, err := s.Catalog().createGroup(ctx, "bucket_definitions: {}", "syncpipe_", storageV1)
	if err != nil {
		t.Fatal(err)
	}
	todos := registerTable(t, s, g.ID, "todos")
	for _, q := range []struct {
		sql  string
		args []any
	}{{`
		INSERT INTO bucket_data (group_id, bucket_name, op_id, op, source_table, source_key, object_type, object_id, checksum, data)
		SELECT $1, '1#by_list["' || (i % 1000) || '"]', i, 1, $2, gen_random_uuid(), 'todos', i::text, i, '{}'
		FROM generate_series(1, 1000000) i`, []any{g.ID, todos.ID}}, {`
		INSERT INTO current_data (group_id, source_table, source_key, buckets)
		SELECT $1, $2, gen_random_uuid(), ARRAY['1#global[]'] FROM generate_series(1, 100000)`, []any{g.ID, todos.ID}}, {`
		INSERT INTO bucket_data (group_id, bucket_name, op_id, op, checksum) VALUES ($1, 'x', 1, 1, 0)`, []any{other.ID}},
	} {
		if _, err := s.pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatal(err)
		}
	}

	const batch = 10000
	var batches int
	largest := int64(0)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := ClearOptions{BatchSize: batch, OnBatch: func(table string, n int64) {
		batches++
		largest = max(largest, n)
		if batches == 30 {
			cancel()
		}
	}}
	st, err := s.Compactor().Clear(cctx, g.ID, opts)
	if !errors.Is(err, context.Canceled) || st.Batches != 30 {
		t.Fatalf("cancelled clear: %+v, %v; want 30 batches and context.Canceled", st, err)
	}
	var left int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM bucket_data WHERE group_id = $1", g.ID).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1000000-30*batch {
		t.Fatalf("after cancel %d ops left, want %d (each batch commits on its own)", left, 1000000-30*batch)
	}
	st2, err := s.Compactor().Clear(ctx, g.ID, opts)
	if err != nil {
		t.Fatal(err)
	}
	// 70 more op batches, 10 of current_data, 1 of source_tables.
	if st2.Batches != 70+10+1 || largest > batch {
		t.Fatalf("resumed clear: %+v, largest batch %d; want 81 batches of ≤ %d rows", st2, largest, batch)
	}
	for _, table := range []string{"bucket_data", "current_data", "source_tables"} {
		var n int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE group_id = $1", g.ID).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s still has %d rows of the cleared group (%v)", table, n, err)
		}
	}
	var otherOps int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM bucket_data WHERE group_id = $1", other.ID).Scan(&otherOps); err != nil || otherOps != 1 {
		t.Fatalf("other group lost its ops: %d (%v)", otherOps, err)
	}
}

// partitionState describes group's partitions as the catalog has them:
// "" when neither exists, else each one's name and whether it is
// attached (and detach pending) or a table of its own.
func partitionState(t testing.TB, s *Store, group int) string {
	t.Helper()
	ops, cur := testLayout(t, s, group).partitions(group)
	var state string
	err := s.pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(c.relname || CASE
			WHEN i.inhrelid IS NULL THEN ' (a table)' WHEN i.inhdetachpending THEN ' (detach pending)' ELSE ' (attached)' END, ', '
			ORDER BY c.relname), '')
		FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		WHERE c.relname = ANY($1) AND c.relnamespace = current_schema()::regnamespace`, []string{ops, cur}).Scan(&state)
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// groupRows counts group's ops, current rows and bucket names.
func groupRows(t testing.TB, s *Store, group int) (ops, cur, names int) {
	t.Helper()
	lay := testLayout(t, s, group)
	err := s.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+lay.ops+` WHERE group_id = $1),
		(SELECT count(*) FROM `+lay.cur+` WHERE group_id = $1), (SELECT count(*) FROM bucket_names WHERE group_id = $1)`,
		group).Scan(&ops, &cur, &names)
	if err != nil {
		t.Fatal(err)
	}
	return ops, cur, names
}

// TestTerminateDropsPartitions: Terminate drops a v2 group's partitions
// (not only empties them) and deletes its bucket names and its other
// rows, leaves another group's alone, and run again finds nothing to do.
func TestTerminateDropsPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g, other := twoGroupsWithRows(t, 100)
	if ops, cur, names := groupRows(t, s, g.ID); ops != 100 || cur != 100 || names != 12 {
		t.Fatalf("group holds %d ops, %d rows and %d bucket names, want 100, 100 and 12", ops, cur, names)
	}
	for run := 1; run <= 2; run++ {
		st, err := s.Compactor().Terminate(ctx, g.ID, ClearOptions{BatchSize: 5})
		if err != nil {
			t.Fatalf("Terminate (run %d): %v", run, err)
		}
		t.Logf("terminate (run %d): %+v", run, st)
		if run == 2 && st.Rows != 0 {
			t.Fatalf("Terminate run again deleted %d rows, want none", st.Rows)
		}
		if p := partitionState(t, s, g.ID); p != "" {
			t.Fatalf("after Terminate (run %d) the group still has partitions: %s", run, p)
		}
		var left int
		if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM bucket_names WHERE group_id = $1)
			+ (SELECT count(*) FROM source_tables WHERE group_id = $1)`, g.ID).Scan(&left); err != nil || left != 0 {
			t.Fatalf("after Terminate (run %d) %d bucket names and tables are left (%v)", run, left, err)
		}
	}
	if p := partitionState(t, s, other.ID); !strings.Contains(p, "bucket_data2_g") || strings.Count(p, "(attached)") != 2 {
		t.Fatalf("the other group's partitions: %s, want both attached", p)
	}
	if ops, cur, names := groupRows(t, s, other.ID); ops != 100 || cur != 100 || names != 12 {
		t.Fatalf("the other group holds %d ops, %d rows and %d bucket names, want 100, 100 and 12", ops, cur, names)
	}
	var state State
	if err := s.pool.QueryRow(ctx, `SELECT state FROM groups WHERE id = $1`, g.ID).Scan(&state); err != nil || state != StateTerminated {
		t.Fatalf("group state %q (%v), want %s", state, err, StateTerminated)
	}
}

// TestRetiringListsUnfinishedRetirements: Retiring lists a stopped group,
// and a terminated one until Terminate has cleared it (Terminate marks it
// TERMINATED first, so a retire cut off by a restart is found again), and
// never a serving group.
func TestRetiringListsUnfinishedRetirements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, g := twoGroupsWithRows(t, 10)
	retiring := func() []int {
		t.Helper()
		gs, err := s.Catalog().Retiring(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for _, g := range gs {
			ids = append(ids, g.ID)
		}
		return ids
	}
	check := func(when string, want ...int) {
		t.Helper()
		if got := retiring(); !slices.Equal(got, want) {
			t.Fatalf("%s: Retiring lists groups %v, want %v", when, got, want)
		}
	}
	check("nothing stopped")
	for _, st := range []State{StateStop, StateTerminated} {
		if err := s.Catalog().SetState(ctx, g.ID, st); err != nil {
			t.Fatal(err)
		}
		check(string(st)+", not cleared", g.ID)
	}
	// Cut off after the partitions went: its tables and names are left.
	lay := testLayout(t, s, g.ID)
	ops, cur := lay.partitions(g.ID)
	for _, p := range [][2]string{{lay.ops, ops}, {lay.cur, cur}} {
		if err := s.Compactor().dropPartition(ctx, p[0], p[1], 0); err != nil {
			t.Fatal(err)
		}
	}
	check("partitions dropped", g.ID)
	if _, err := s.Compactor().Terminate(ctx, g.ID, ClearOptions{}); err != nil {
		t.Fatal(err)
	}
	check("cleared")
	if _, err := s.pool.Exec(ctx, `INSERT INTO bucket_names (group_id, id, name) VALUES ($1, nextval('bucket_id_seq'), 'x')`, g.ID); err != nil {
		t.Fatal(err)
	}
	check("a bucket name left", g.ID)
}

// twoGroupsWithRows opens a store with two groups (the second created
// with empty rules) and writes rows snapshot rows of a todos table to each.
func twoGroupsWithRows(t *testing.T, rows int) (s *Store, g, other Group) {
	t.Helper()
	s, g = openStore(t)
	other, err := s.Catalog().CreateGroup(context.Background(), "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	for _, grp := range []int{g.ID, other.ID} {
		writeSnapshotRows(t, newWriter(t, s, grp), registerTable(t, s, grp, "todos"), 0, rows)
	}
	return s, g, other
}
