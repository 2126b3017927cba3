package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestReplicationMetrics runs syncpipe with a metrics listener, snapshots
// the todo tables and streams some changes, and checks /metrics: rows per
// phase exactly, a small replication lag, the slot's health read from the
// source, busy time of every stream stage, lease acquisitions and no
// failing units; then, after a SIGKILL, the new process's stream lease is
// counted as a takeover.
func TestReplicationMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const lists, todoRows = 4, 150
	addr := harness.FreeAddr(t)
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: lists, Todos: todoRows, Seed: 1},
		Env:  []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + addr},
	})
	e.Start()
	e.WaitCaughtUp(ctx)

	// Streamed: 30 inserts in one transaction, 10 updates, 5 deletes.
	e.Exec(ctx, `INSERT INTO todos (id, list_id, description)
		SELECT gen_random_uuid(), (SELECT min(id::text)::uuid FROM lists), 'streamed ' || i FROM generate_series(1, 30) i`)
	e.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 10)`)
	e.Exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 5)`)
	e.WaitCaughtUp(ctx)
	var slot string
	if err := e.Storage.QueryRow(ctx, `SELECT slot_name FROM syncpipe.groups WHERE state = 'ACTIVE'`).Scan(&slot); err != nil {
		t.Fatal(err)
	}

	const snapshotRows, streamRows = lists + todoRows, 30 + 10 + 5
	var ss []harness.Series
	e.WaitFor(ctx, "the streamed rows on /metrics", func() bool {
		ss = harness.Scrape(ctx, addr)
		v, _ := harness.Sample(ss, "syncpipe_rows_replicated_total", "phase", "stream")
		return v >= streamRows
	})
	for _, s := range ss {
		if strings.HasPrefix(s.Name, "syncpipe_") {
			t.Log(s.Line)
		}
	}
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("/metrics: %s", what)
		}
	}
	sample := harness.Sample
	snap, _ := sample(ss, "syncpipe_rows_replicated_total", "phase", "snapshot", "pipeline", "default")
	stream, _ := sample(ss, "syncpipe_rows_replicated_total", "phase", "stream", "pipeline", "default")
	check(fmt.Sprintf("rows replicated: snapshot %v, stream %v, want %d and %d", snap, stream, snapshotRows, streamRows),
		snap == snapshotRows && stream == streamRows)
	lag, ok := sample(ss, "syncpipe_replication_lag_seconds", "group", "1")
	check(fmt.Sprintf("replication lag of group 1: %v (reported %v), want 0 ≤ lag < 5 s", lag, ok), ok && lag >= 0 && lag < 5)
	slotLag, ok := sample(ss, "syncpipe_slot_lag_bytes", "slot", slot)
	check(fmt.Sprintf("slot %s lag %v bytes (reported %v)", slot, slotLag, ok), ok && slotLag >= 0)
	reserved, _ := sample(ss, "syncpipe_slot_wal_status", "slot", slot, "status", "reserved")
	lost, lostOK := sample(ss, "syncpipe_slot_wal_status", "slot", slot, "status", "lost")
	check(fmt.Sprintf("slot %s wal_status: reserved %v, lost %v", slot, reserved, lost), reserved == 1 && lostOK && lost == 0)
	active, _ := sample(ss, "syncpipe_slot_active", "slot", slot)
	check(fmt.Sprintf("slot %s active %v, want 1", slot, active), active == 1)
	for _, stage := range []string{"read", "decode", "eval", "build", "probe", "flush", "commit"} {
		busy, _ := sample(ss, "syncpipe_stage_busy_seconds_total", "phase", "stream", "stage", stage)
		check(fmt.Sprintf("stream stage %s busy %v s, want > 0", stage, busy), busy > 0)
	}
	for _, stage := range []string{"read", "eval", "build", "flush", "commit"} {
		rows, _ := sample(ss, "syncpipe_stage_rows_total", "phase", "snapshot", "stage", stage)
		check(fmt.Sprintf("snapshot stage %s rows %v, want %d", stage, rows, snapshotRows), rows == snapshotRows)
	}
	for _, unit := range []string{"stream", "snapshot"} {
		n, _ := sample(ss, "syncpipe_lease_acquisitions_total", "unit", unit)
		check(fmt.Sprintf("%s lease acquisitions %v, want ≥ 1", unit, n), n >= 1)
	}
	if n, _ := sample(ss, "syncpipe_lease_takeovers_total"); n != 0 {
		t.Errorf("/metrics: %v lease takeovers on a fresh start, want 0", n)
	}
	if n, _ := sample(ss, "syncpipe_replication_failing_units"); n != 0 {
		t.Errorf("/metrics: %v failing units, want 0", n)
	}
	// The live heap (what memory per connection is read from) besides the
	// Go runtime's defaults.
	live, ok := sample(ss, "go_gc_heap_live_bytes")
	check(fmt.Sprintf("go_gc_heap_live_bytes %v (reported %v), want > 0", live, ok), ok && live > 0)
	if t.Failed() {
		return
	}

	// A SIGKILLed process releases nothing: its successor takes the
	// stream over.
	e.Kill()
	e.Start()
	e.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = (SELECT min(id::text)::uuid FROM todos)`)
	e.WaitCaughtUp(ctx)
	e.WaitFor(ctx, "a stream lease takeover on /metrics", func() bool {
		ss = harness.Scrape(ctx, addr)
		n, _ := sample(ss, "syncpipe_lease_takeovers_total", "unit", "stream")
		rows, _ := sample(ss, "syncpipe_rows_replicated_total", "phase", "stream")
		return n >= 1 && rows >= 1
	})
	for _, s := range ss {
		if strings.HasPrefix(s.Name, "syncpipe_lease") {
			t.Log(s.Line)
		}
	}
}
