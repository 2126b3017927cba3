package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// idleWindow is how long TestIdleStreamIsIdle watches a caught-up stream
// with no source change (the acceptance: 30 s).
const idleWindow = 30 * time.Second

// TestIdleStreamIsIdle: source and storage are two databases of one
// cluster (the test cluster, as in the demo and SPEC §9), where every
// storage commit writes the WAL the slot then reports as a new position.
// A caught-up `syncpipe run` whose source does not change commits to
// storage at most once a second on average (it used to record every
// position at once: about a thousand commits a second; see
// replication.stream.idle_commit_interval), the slot's
// confirmed_flush_lsn still advances, and a write checkpoint requested in
// the idle period reaches an open sync stream within 2 s.
func TestIdleStreamIsIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.StreamRules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 50, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitCaughtUp(ctx)
	tok := e.token("user1")
	s := openRawStreamWith(t, ctx, e.api, tok, `{"raw_data":true,"client_id":"c1"}`)
	if !s.until(t, ctx, "checkpoint_complete") {
		t.Fatal("the sync stream ended before its first checkpoint")
	}
	slot := e.groupSlot(ctx)
	commits0, flush0 := e.writeCommits(ctx), e.confirmedFlush(ctx, slot)
	start := time.Now()

	// Halfway through, a client asks for a write checkpoint.
	e.sleepUntil(ctx, start.Add(idleWindow/2))
	n := e.writeCheckpoint(ctx, tok, "c1")
	asked := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if !s.until(t, wctx, fmt.Sprintf(`"write_checkpoint":"%d"`, n)) {
		t.Fatal("the sync stream ended before the write checkpoint")
	}
	wcancel()
	if d := time.Since(asked); d > 2*time.Second {
		t.Errorf("write checkpoint %d reached the stream after %s, want ≤ 2s", n, d.Round(time.Millisecond))
	}

	e.sleepUntil(ctx, start.Add(idleWindow))
	commits1, flush1 := e.writeCommits(ctx), e.confirmedFlush(ctx, slot)
	window := time.Since(start)
	rate := float64(commits1-commits0) / window.Seconds()
	t.Logf("idle for %s: %d write transactions in the cluster (%.2f/s, the write checkpoint's included), confirmed_flush_lsn +%d bytes",
		window.Round(time.Millisecond), commits1-commits0, rate, flush1-flush0)
	if rate > 1 {
		t.Errorf("an idle stream wrote to storage %.1f times a second, want ≤ 1", rate)
	}
	if flush1 <= flush0 {
		t.Errorf("the slot's confirmed_flush_lsn did not advance while idle (at %d bytes)", flush0)
	}
	e.alive()
}

// sleepUntil waits until deadline, or fails when ctx ends or the child
// exits. It paces a measurement window; it synchronises with nothing.
func (e *streamEnv) sleepUntil(ctx context.Context, deadline time.Time) {
	e.t.Helper()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		e.t.Fatalf("waiting until %s: %v", deadline.Format(time.TimeOnly), ctx.Err())
	case <-e.child.exited:
		e.t.Fatalf("syncpipe exited: %v", e.child.err)
	}
}

// writeCommits counts the cluster's write transactions so far: the
// transaction ids assigned (the snapshot's xmax; reading it assigns none).
// While the source is idle they are syncpipe's storage writes. The commit
// counter of pg_stat_database is no measure of them: it counts read-only
// transactions too, and each backend reports it only now and then (up to
// 10 s late for an idle one), so a window's count includes earlier work.
func (e *streamEnv) writeCommits(ctx context.Context) int64 {
	e.t.Helper()
	var n int64
	if err := e.storage.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// groupSlot is the replication slot of the active group.
func (e *streamEnv) groupSlot(ctx context.Context) string {
	e.t.Helper()
	var slot string
	if err := e.storage.QueryRow(ctx, `SELECT slot_name FROM syncpipe.groups WHERE state = 'ACTIVE'`).Scan(&slot); err != nil {
		e.t.Fatal(err)
	}
	return slot
}

// confirmedFlush is slot's confirmed_flush_lsn on the source, as a number.
func (e *streamEnv) confirmedFlush(ctx context.Context, slot string) uint64 {
	e.t.Helper()
	var lsn uint64
	err := e.src.QueryRow(ctx, `SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn)
	if err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// writeCheckpoint asks the API for a write checkpoint of client and
// returns its number.
func (e *streamEnv) writeCheckpoint(ctx context.Context, token, client string) int64 {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.api+"/write-checkpoint2.json?client_id="+client, nil)
	req.Header.Set("Authorization", "Token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("write checkpoint: HTTP %d %s", resp.StatusCode, b)
	}
	var out struct {
		Data struct {
			WriteCheckpoint int64 `json:"write_checkpoint,string"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("write checkpoint: %v in %s", err, b)
	}
	return out.Data.WriteCheckpoint
}
