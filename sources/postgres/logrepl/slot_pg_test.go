package logrepl

import (
	"context"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestSlotBeingCreatedIsAwaited: a logical slot is listed while another
// session is still creating it (waiting for the transactions running on
// the source), with no consistent point yet. A second process that found
// it then and went on to read its snapshot lost the changes committed
// before the point (the torture harness saw two processes starting at
// once lose a row and an update). CreateSlot's duplicate path and
// AwaitSlot must both wait until the slot is ready and return its point.
func TestSlotBeingCreatedIsAwaited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &env{t: t, uri: pgtest.NewDB(t), slot: testSlot(t)}
	e.db = pgtest.Connect(t, e.uri)
	t.Cleanup(func() { _ = DropSlot(context.Background(), e.db.PgConn(), e.slot) })

	// An open transaction with an xid holds the creation before its
	// consistent point.
	blocker := pgtest.Connect(t, e.uri)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}

	type created struct {
		lsn LSN
		err error
	}
	first := make(chan created, 1)
	go func() {
		lsn, err := CreateSlot(ctx, e.replConn(ctx), e.slot)
		first <- created{lsn, err}
	}()
	e.waitSQL(ctx, "the slot listed while it is created", `SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = $1`, e.slot)

	second := make(chan created, 1)
	rc := e.replConn(ctx)
	go func() {
		lsn, err := CreateSlot(ctx, rc, e.slot)
		second <- created{lsn, err}
	}()
	awaited := make(chan created, 1)
	go func() {
		s, err := AwaitSlot(ctx, e.replConn(ctx), e.slot)
		awaited <- created{s.ConfirmedFlushLSN, err}
	}()
	// The second CreateSlot has looked at the slot (its last statement on
	// its session is the lookup) while the creation is still held.
	e.waitSQL(ctx, "the second CreateSlot to look the slot up",
		`SELECT coalesce(bool_or(query LIKE '%pg_replication_slots%'), false) FROM pg_stat_activity WHERE pid = $1`, rc.PID())
	select {
	case c := <-second:
		t.Fatalf("the second CreateSlot returned %s (err %v) while the slot was still being created", c.lsn, c.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := <-first
	if want.err != nil || want.lsn == 0 {
		t.Fatalf("the creating CreateSlot: %s, %v", want.lsn, want.err)
	}
	for name, ch := range map[string]chan created{"the second CreateSlot": second, "AwaitSlot": awaited} {
		got := <-ch
		if got.err != nil || got.lsn != want.lsn {
			t.Errorf("%s returned %s (err %v), want the slot's consistent point %s", name, got.lsn, got.err, want.lsn)
		}
	}
}

// waitSQL polls a boolean query every 20 ms until it is true.
func (e *env) waitSQL(ctx context.Context, what, query string, args ...any) {
	e.t.Helper()
	for {
		var ok bool
		if err := e.db.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
