package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
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
//
// Not parallel: it counts the write transactions of the whole test
// cluster (see writeCommits), which the package's other tests would add
// to; Go runs the parallel tests after it.
func TestIdleStreamIsIdle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: todos.StreamRules, Data: &todos.Size{Lists: 3, Todos: 50, Seed: 9}})
	p := e.Start()
	e.WaitCaughtUp(ctx)
	tok := e.Token("user1")
	s := harness.OpenStream(t, ctx, e.API, tok, `{"raw_data":true,"client_id":"c1"}`)
	if !s.Until(t, ctx, "checkpoint_complete") {
		t.Fatal("the sync stream ended before its first checkpoint")
	}
	slot := groupSlot(ctx, e)
	commits0, flush0 := writeCommits(ctx, e), confirmedFlush(ctx, e, slot)
	start := time.Now()

	// Halfway through, a client asks for a write checkpoint.
	sleepUntil(t, ctx, p, start.Add(idleWindow/2))
	n := writeCheckpoint(ctx, e, tok, "c1")
	asked := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	if !s.Until(t, wctx, fmt.Sprintf(`"write_checkpoint":"%d"`, n)) {
		t.Fatal("the sync stream ended before the write checkpoint")
	}
	wcancel()
	if d := time.Since(asked); d > 2*time.Second {
		t.Errorf("write checkpoint %d reached the stream after %s, want ≤ 2s", n, d.Round(time.Millisecond))
	}

	sleepUntil(t, ctx, p, start.Add(idleWindow))
	commits1, flush1 := writeCommits(ctx, e), confirmedFlush(ctx, e, slot)
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
	e.Alive()
}

// writeCommits counts the cluster's write transactions so far: the
// transaction ids assigned (the snapshot's xmax; reading it assigns none).
// While the source is idle they are syncpipe's storage writes. The commit
// counter of pg_stat_database is no measure of them: it counts read-only
// transactions too, and each backend reports it only now and then (up to
// 10 s late for an idle one), so a window's count includes earlier work.
func writeCommits(ctx context.Context, e *harness.Env) int64 {
	e.T.Helper()
	var n int64
	if err := e.Storage.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&n); err != nil {
		e.T.Fatal(err)
	}
	return n
}

// groupSlot is the replication slot of the active group.
func groupSlot(ctx context.Context, e *harness.Env) string {
	e.T.Helper()
	var slot string
	if err := e.Storage.QueryRow(ctx, `SELECT slot_name FROM syncpipe.groups WHERE state = 'ACTIVE'`).Scan(&slot); err != nil {
		e.T.Fatal(err)
	}
	return slot
}

// confirmedFlush is slot's confirmed_flush_lsn on the source, as a number.
func confirmedFlush(ctx context.Context, e *harness.Env, slot string) uint64 {
	e.T.Helper()
	var lsn uint64
	err := e.Src.QueryRow(ctx, `SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn)
	if err != nil {
		e.T.Fatal(err)
	}
	return lsn
}

// writeCheckpoint asks the API for a write checkpoint of client and
// returns its number.
func writeCheckpoint(ctx context.Context, e *harness.Env, token, client string) int64 {
	e.T.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.API+"/write-checkpoint2.json?client_id="+client, nil)
	req.Header.Set("Authorization", "Token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		e.T.Fatalf("write checkpoint: HTTP %d %s", resp.StatusCode, b)
	}
	var out struct {
		Data struct {
			WriteCheckpoint int64 `json:"write_checkpoint,string"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		e.T.Fatalf("write checkpoint: %v in %s", err, b)
	}
	return out.Data.WriteCheckpoint
}
