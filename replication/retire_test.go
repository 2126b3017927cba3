package replication

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// TestLostSlotStartsNewGroup drops the replication slot of the serving
// group twice — once while it streams, once while syncpipe is down — and
// checks that each time a new group re-snapshots the source (including
// the changes made while no slot recorded them) and takes over, and that
// the old group is retired: slot gone, data cleared.
func TestLostSlotStartsNewGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newEnv(t, todos.Size{Lists: 10, Todos: 300, Seed: 5}, "")
	start := func() func() {
		rctx, stop := context.WithCancel(ctx)
		r := New(Options{Config: e.cfg, Store: e.store})
		errc := make(chan error, 1)
		go func() { errc <- r.Run(rctx) }()
		return func() {
			stop()
			if err := <-errc; err != nil && rctx.Err() == nil {
				t.Errorf("replicator: %v", err)
			}
		}
	}
	stop := start()
	e.waitCheckpoint(t, ctx)
	first := e.activeGroup(t, ctx)

	// While streaming: the walsender is killed and the slot dropped before
	// the stream reconnects.
	e.dropSlot(t, ctx, first.SlotName)
	if _, err := e.src.Exec(ctx, `DELETE FROM todos WHERE description LIKE 'buy%'; UPDATE lists SET name = name || ' (renamed)'`); err != nil {
		t.Fatal(err)
	}
	second := e.waitTakeover(t, ctx, first)
	e.checkReplaced(t, second)
	stop()

	// While down.
	e.dropSlot(t, ctx, second.SlotName)
	if _, err := e.src.Exec(ctx, `INSERT INTO todos (id, list_id, description, completed, created_at)
		SELECT gen_random_uuid(), id, 'added while down', false, now() FROM lists`); err != nil {
		t.Fatal(err)
	}
	stop = start()
	defer stop()
	third := e.waitTakeover(t, ctx, second)
	e.checkReplaced(t, third)
}

func (e *env) activeGroup(t *testing.T, ctx context.Context) bucketstore.Group {
	t.Helper()
	gs, err := e.store.Catalog().Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.State == bucketstore.StateActive {
			return g
		}
	}
	t.Fatalf("no active group among %+v", gs)
	return bucketstore.Group{}
}

// dropSlot drops a slot, terminating the walsender that holds it as often
// as it comes back.
func (e *env) dropSlot(t *testing.T, ctx context.Context, slot string) {
	t.Helper()
	for {
		_, err := e.src.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.src.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		if err == nil {
			return
		}
		// 55006 object_in_use: the stream reconnected in between.
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "55006" || ctx.Err() != nil {
			t.Fatalf("drop slot %s: %v", slot, err)
		}
	}
}

// waitTakeover waits until a group other than old is active, has caught
// up with the source, and old is retired.
func (e *env) waitTakeover(t *testing.T, ctx context.Context, old bucketstore.Group) bucketstore.Group {
	t.Helper()
	// The replacement takes over at its first checkpoint: wait for the
	// takeover itself, then for the catch-up. (A checkpoint past the
	// source's position alone did not say which group serves: in CI run 1
	// of issue 41 the old group was still the active one when one was
	// there, 1.8 s into TestSlotLostThreeTimesServesThroughout; why it
	// was past the position read after the drop is not known yet.)
	var g bucketstore.Group
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for g = e.activeGroup(t, ctx); g.ID == old.ID; g = e.activeGroup(t, ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("group %d still active after its slot was dropped: %v", old.ID, ctx.Err())
		case <-tick.C:
		}
	}
	e.waitCheckpoint(t, ctx)
	// Retirement runs after the takeover; poll its outcome.
	for {
		var n int
		err := e.src.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, old.SlotName).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := e.store.Catalog().Group(ctx, old.ID)
		if err != nil {
			t.Fatal(err)
		}
		var left int
		if err := e.store.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM syncpipe.bucket_ops WHERE group_id = $1)
			+ (SELECT count(*) FROM syncpipe.current_data3 WHERE group_id = $1)`, old.ID).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if n == 0 && cur.State == bucketstore.StateTerminated && left == 0 {
			return g
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %d not retired: state %s, %d slots named %s, %d rows left", old.ID, cur.State, n, old.SlotName, left)
		case <-tick.C:
		}
	}
}

// checkReplaced compares the new group's buckets with the source.
func (e *env) checkReplaced(t *testing.T, cur bucketstore.Group) {
	t.Helper()
	want := bucketcheck.State{}
	for b, rows := range e.expected(t) {
		want[strings.Replace(b, "1#", strconv.Itoa(cur.ID)+"#", 1)] = rows
	}
	sameBuckets(t, e.buckets(t), want)
}
