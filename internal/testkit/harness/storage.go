package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
)

// SourceLSN is the source's current WAL insert position.
func (e *Env) SourceLSN(ctx context.Context) string {
	e.T.Helper()
	var lsn string
	if err := e.Src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		e.T.Fatal(err)
	}
	return lsn
}

// WaitCaughtUp waits until an active group published a checkpoint at or
// past the source's current position, failing if the last child exits.
func (e *Env) WaitCaughtUp(ctx context.Context) {
	e.T.Helper()
	target := e.SourceLSN(ctx)
	e.WaitFor(ctx, "a checkpoint past "+target, func() bool {
		var reached bool
		err := e.Storage.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false)
			FROM syncpipe.groups WHERE state = 'ACTIVE'`, target).Scan(&reached)
		return err == nil && reached
	})
}

// WaitFor polls cond every 20 ms until it holds, failing when ctx ends or
// the last child exits.
func (e *Env) WaitFor(ctx context.Context, what string, cond func() bool) {
	e.T.Helper()
	Poll(e.T, ctx, e.Proc(), what, cond)
}

// Converge waits until storage holds want() (computed from the source
// each time), failing with the last difference after timeout or when the
// last child exits.
func (e *Env) Converge(ctx context.Context, timeout time.Duration, want func() bucketcheck.State) {
	e.T.Helper()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := bucketcheck.Stored(ctx, e.Storage, "syncpipe")
		if err == nil {
			err = bucketcheck.Diff(got, want())
		}
		if err == nil {
			return
		}
		last = err
		select {
		case <-cctx.Done():
			e.T.Fatalf("storage does not equal the source after %s: %v", timeout, last)
		case <-tick.C:
		}
		if p := e.Proc(); p != nil && !p.Running() {
			e.T.Fatalf("syncpipe exited: %v (storage: %v)", p.Err(), last)
		}
	}
}

// Todos returns what the todo rules of group put in storage, computed from
// the source each time it is called (bucketcheck.ExpectedTodosGroup).
func (e *Env) Todos(ctx context.Context, group int) func() bucketcheck.State {
	return func() bucketcheck.State {
		st, err := bucketcheck.ExpectedTodosGroup(ctx, e.Src, group)
		if err != nil {
			e.T.Fatal(err)
		}
		return st
	}
}

// Groups returns the groups' ids and states, oldest first.
func (e *Env) Groups(ctx context.Context) (ids []int, states []string) {
	e.T.Helper()
	rows, err := e.Storage.Query(ctx, "SELECT id, state FROM syncpipe.groups ORDER BY id")
	if err != nil {
		e.T.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			e.T.Fatal(err)
		}
		ids, states = append(ids, id), append(states, st)
	}
	return ids, states
}

// ActiveGroup is the id of the ACTIVE group (0 if none).
func (e *Env) ActiveGroup(ctx context.Context) int {
	var id int
	_ = e.Storage.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM syncpipe.groups WHERE state = 'ACTIVE'").Scan(&id)
	return id
}

// DumpGroups describes the stored groups, for failure messages.
func (e *Env) DumpGroups() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := e.Storage.Query(ctx, `SELECT format('%s %s checkpoint=%s@%s stream=%s txn=%s/%s no_before=%s error=%s',
		id, state, last_checkpoint, last_checkpoint_lsn, stream_lsn, stream_txn_lsn, stream_txn_changes, no_checkpoint_before, last_error)
		FROM syncpipe.groups ORDER BY id`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		_ = rows.Scan(&line)
		b.WriteString(line + "\n")
	}
	return b.String()
}

// DropSlot terminates the walsender streaming from slot and drops it,
// retrying while syncpipe reconnects in between.
func DropSlot(ctx context.Context, t testing.TB, conn *pgx.Conn, slot string) {
	t.Helper()
	// syncpipe takes the slot back as soon as its connection is gone, so
	// the drop must come between its holder's exit (the terminate waits
	// for it, up to 5 s) and the reconnect; a reconnect that won the race
	// is terminated again.
	for attempt := 0; ; attempt++ {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "is active") || attempt > 200 {
			t.Fatalf("drop slot %s: %v", slot, err)
		}
	}
}
