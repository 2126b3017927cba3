package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// series is one sample of a /metrics scrape.
type series struct {
	name   string
	labels map[string]string
	value  float64
	line   string
}

// scrape reads every sample of addr's /metrics (nil if it does not answer).
func scrape(ctx context.Context, addr string) []series {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []series
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[sp+1:], 64)
		if err != nil {
			continue
		}
		s := series{labels: map[string]string{}, value: v, line: l}
		key := l[:sp]
		name, labels, hasLabels := strings.Cut(key, "{")
		s.name = name
		if hasLabels {
			for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// sample returns the value of the series named name that has all of
// labels ("k", "v", …) and whether there is one (the sum if several).
func sample(ss []series, name string, labels ...string) (float64, bool) {
	var sum float64
	found := false
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue next
			}
		}
		sum += s.value
		found = true
	}
	return sum, found
}

// TestReplicationMetrics runs syncpipe with a metrics listener, snapshots
// the todo tables and streams some changes, and checks /metrics: rows per
// phase exactly, a small replication lag, the slot's health read from the
// source, busy time of every stream stage, lease acquisitions and no
// failing units; then, after a SIGKILL, the new process's stream lease is
// counted as a takeover.
func TestReplicationMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	const lists, todoRows = 4, 150
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: lists, Todos: todoRows, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	e.env = append(e.env, "SYNCPIPE_TELEMETRY__METRICS_LISTEN="+addr)
	e.start()
	e.waitCaughtUp(ctx)

	// Streamed: 30 inserts in one transaction, 10 updates, 5 deletes.
	e.exec(ctx, `INSERT INTO todos (id, list_id, description)
		SELECT gen_random_uuid(), (SELECT min(id::text)::uuid FROM lists), 'streamed ' || i FROM generate_series(1, 30) i`)
	e.exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 10)`)
	e.exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 5)`)
	e.waitCaughtUp(ctx)
	var slot string
	if err := e.storage.QueryRow(ctx, `SELECT slot_name FROM syncpipe.groups WHERE state = 'ACTIVE'`).Scan(&slot); err != nil {
		t.Fatal(err)
	}

	const snapshotRows, streamRows = lists + todoRows, 30 + 10 + 5
	var ss []series
	e.waitFor(ctx, "the streamed rows on /metrics", func() bool {
		ss = scrape(ctx, addr)
		v, _ := sample(ss, "syncpipe_rows_replicated_total", "phase", "stream")
		return v >= streamRows
	})
	for _, s := range ss {
		if strings.HasPrefix(s.name, "syncpipe_") {
			t.Log(s.line)
		}
	}
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("/metrics: %s", what)
		}
	}
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
	e.kill()
	e.start()
	e.exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = (SELECT min(id::text)::uuid FROM todos)`)
	e.waitCaughtUp(ctx)
	e.waitFor(ctx, "a stream lease takeover on /metrics", func() bool {
		ss = scrape(ctx, addr)
		n, _ := sample(ss, "syncpipe_lease_takeovers_total", "unit", "stream")
		rows, _ := sample(ss, "syncpipe_rows_replicated_total", "phase", "stream")
		return n >= 1 && rows >= 1
	})
	for _, s := range ss {
		if strings.HasPrefix(s.name, "syncpipe_lease") {
			t.Log(s.line)
		}
	}
}
