package bucketstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// genericRead counts group's ops in tx with a generic plan, the plan
// PostgreSQL settles on for a statement prepared and run often, which
// locks every partition of bucket_data2 (pruning happens when it runs),
// not only group's: the worst case for a retire of another group.
func genericRead(ctx context.Context, tx pgx.Tx, group int) (int, error) {
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		return 0, err
	}
	var n int
	err := tx.QueryRow(ctx, "SELECT count(*) FROM bucket_data2 WHERE group_id = $1", group).Scan(&n)
	return n, err
}

// TestTerminateNeverBlocksOtherGroups: while a long transaction that read
// group A's ops is open, retiring other groups never stops A's other
// readers (a detach takes no lock on the parent that they wait for). A
// retire of B with a short timeout fails, leaving B's ops partition
// detach pending, and a group can still be created. A retire of D then
// finishes B's detach first (a parent has one pending at a time), waits
// for the reader, with fresh reads of A served meanwhile, and finishes
// once the reader ends. B's next retire drops what is left of B, and run
// again finds nothing.
func TestTerminateNeverBlocksOtherGroups(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, a := openStore(t)
	b, err := s.Catalog().CreateGroup(ctx, "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Catalog().CreateGroup(ctx, "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	for _, grp := range []int{a.ID, b.ID, d.ID} {
		writeSnapshotRows(t, newWriter(t, s, grp), registerTable(t, s, grp, "todos"), 0, 100)
	}
	long, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Rollback(ctx) }()
	if n, err := genericRead(ctx, long, a.ID); err != nil || n != 100 {
		t.Fatalf("long read: %d ops (%v), want 100", n, err)
	}
	// freshRead reads A's ops in a transaction of its own, bounded: a
	// read queued behind the retire's lock would time out.
	freshRead := func(when string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		tx, err := s.pool.Begin(rctx)
		if err != nil {
			t.Fatalf("fresh read %s: %v", when, err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if n, err := genericRead(rctx, tx, a.ID); err != nil || n != 100 {
			t.Fatalf("fresh read of group %d %s: %d ops (%v), want 100 at once", a.ID, when, n, err)
		}
	}

	// Interrupted: the detach waits for the long reader past its
	// timeout.
	if _, err := s.Compactor().Terminate(ctx, b.ID, ClearOptions{DropTimeout: time.Second}); err == nil ||
		!strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("Terminate with a reader open: %v, want a statement timeout", err)
	}
	if p := partitionState(t, s, b.ID); !strings.Contains(p, "(detach pending)") {
		t.Fatalf("after an interrupted Terminate the partitions are %s, want one detach pending", p)
	}
	freshRead("with a detach pending")
	c, err := s.Catalog().CreateGroup(ctx, "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatalf("create a group while a detach is pending: %v", err)
	}

	// Waiting: D's retire finishes B's detach and detaches D's partitions
	// once the reader is gone; until then A's readers go on.
	done := make(chan error, 1)
	go func() {
		_, err := s.Compactor().Terminate(ctx, d.ID, ClearOptions{DropTimeout: time.Minute})
		done <- err
	}()
	waitUntil(t, "the retire to wait for a lock", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Terminate returned before it waited for the reader: %v", err)
		default:
		}
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'ALTER TABLE % DETACH PARTITION %' AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	})
	freshRead("while the retire waits")
	select {
	case err := <-done:
		t.Fatalf("Terminate returned while the reader was open: %v", err)
	default:
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Terminate after the reader ended: %v", err)
	}
	ops, _ := testLayout(t, s, b.ID).partitions(b.ID)
	if p := partitionState(t, s, b.ID); !strings.Contains(p, ops+" (a table)") {
		t.Fatalf("after another group's retire group %d's partitions are %s, want %s detached", b.ID, p, ops)
	}
	for run := 1; run <= 2; run++ {
		if _, err := s.Compactor().Terminate(ctx, b.ID, ClearOptions{}); err != nil {
			t.Fatalf("Terminate (run %d): %v", run, err)
		}
		for _, g := range []int{b.ID, d.ID} {
			if p := partitionState(t, s, g); p != "" {
				t.Fatalf("after Terminate (run %d) group %d still has partitions: %s", run, g, p)
			}
			if ops, cur, names := groupRows(t, s, g); ops+cur+names != 0 {
				t.Fatalf("after Terminate (run %d) group %d holds %d ops, %d rows, %d names", run, g, ops, cur, names)
			}
		}
	}
	if ops, cur, names := groupRows(t, s, a.ID); ops != 100 || cur != 100 || names != 12 {
		t.Fatalf("group %d holds %d ops, %d rows and %d names, want 100, 100 and 12", a.ID, ops, cur, names)
	}
	for _, g := range []int{a.ID, c.ID} {
		if p := partitionState(t, s, g); strings.Count(p, "(attached)") != 2 {
			t.Fatalf("group %d's partitions: %s, want both attached", g, p)
		}
	}
}
