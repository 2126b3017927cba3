package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// runOnce runs a one-shot syncpipe command (compact, status) as a child
// process and returns its combined output; it must succeed.
func (e *streamEnv) runOnce(ctx context.Context, args ...string) string {
	e.t.Helper()
	code, out := e.runOnceExit(ctx, args...)
	if code != ExitOK {
		e.t.Fatalf("syncpipe %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// runOnceExit runs a one-shot syncpipe command as a child process and
// returns its exit code and combined output.
func (e *streamEnv) runOnceExit(ctx context.Context, args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), e.env...), childEnv+"="+strings.Join(append(args, "--config", e.config), "\x1f"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		e.t.Fatalf("syncpipe %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestCompactWhileSyncing runs `syncpipe compact` against a running
// `syncpipe run` while the source keeps changing and a client follows the
// stream: the client sees no checksum failure, a client that syncs after
// compaction holds the source, storage keeps one op per live row and
// bucket plus a CLEAR, and status shows the run.
func TestCompactWhileSyncing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 5, Todos: 200, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	want := e.todos(ctx, 1)
	e.start()
	e.waitCaughtUp(ctx)
	early := &switchWatch{}
	c1 := newSyncClient(e.api, e.token("alice"), early.observe)
	cctx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	go c1.run(cctx)
	e.waitFor(ctx, "the first client's first checkpoint", func() bool { return c1.complete() > 0 })

	// Every todo updated 30 times, then compaction while the updates go on.
	// (Caught up every few rounds: the stream writes only a row's last
	// change of a batch, and every round should leave ops.)
	for round := range 30 {
		e.exec(ctx, fmt.Sprintf(`UPDATE todos SET description = 'round %d ' || id`, round))
		if round%3 == 2 {
			e.waitCaughtUp(ctx)
		}
	}
	e.waitCaughtUp(ctx)
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		for round := 0; ctx.Err() == nil && round < 20; round++ {
			e.exec(ctx, fmt.Sprintf(`UPDATE todos SET completed = NOT completed, description = 'during %d ' || id
				WHERE id IN (SELECT id FROM todos ORDER BY random() LIMIT 20)`, round))
		}
	}()
	out := e.runOnce(ctx, "compact", "--batch-ops", "500", "--max-busy", "0.5")
	t.Logf("compact while changing: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "group 1: ") || !strings.Contains(out, "ops moved") {
		t.Fatalf("compact printed %q", out)
	}
	// 30 updates of 200 todos leave thousands of superseded ops, so a
	// nonzero amount, in KiB at least.
	if m := reclaimedRE.FindStringSubmatch(out); m == nil || m[1] == "0" || m[2] == "B" {
		t.Fatalf("compact printed no bytes reclaimed: %q", out)
	}
	<-churnDone
	e.waitCaughtUp(ctx)
	// A last update of every todo: each row's latest op is then in one run
	// at the end of its bucket, and everything before it compacts away.
	e.exec(ctx, `UPDATE todos SET description = 'final ' || id`)
	e.waitCaughtUp(ctx)
	out = e.runOnce(ctx, "compact")
	t.Logf("compact when quiet: %s", strings.TrimSpace(out))
	e.converge(ctx, time.Minute, want)

	// Every bucket holds one PUT per live row and at most one CLEAR.
	current := want()
	rows, err := e.storage.Query(ctx, `SELECT bucket_name, count(*) FILTER (WHERE op = 1), count(*) FILTER (WHERE op <> 1),
		count(*) FILTER (WHERE op = 4) FROM syncpipe.bucket_data WHERE group_id = 1 GROUP BY bucket_name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var bucket string
		var puts, others, clears int
		if err := rows.Scan(&bucket, &puts, &others, &clears); err != nil {
			t.Fatal(err)
		}
		if others > 1 || clears > 1 || puts != len(current[bucket]) {
			t.Errorf("bucket %s after compaction: %d PUTs and %d other ops (%d CLEARs), want %d PUTs and at most one CLEAR",
				bucket, puts, others, clears, len(current[bucket]))
		}
	}
	rows.Close()

	late := &switchWatch{}
	c2 := newSyncClient(e.api, e.token("alice"), late.observe)
	go c2.run(cctx)
	e.waitFor(ctx, "a client syncing after compaction to hold the source", late.holds(current))
	e.waitFor(ctx, "the client syncing throughout to hold it too", early.holds(current))
	for name, c := range map[string]*syncClient{"throughout": c1, "after": c2} {
		if f := c.failures(); len(f) > 0 {
			t.Errorf("the client syncing %s saw protocol errors: %v", name, f)
		}
	}
	status := e.runOnce(ctx, "status")
	if !strings.Contains(status, "group 1 last compacted") || !reclaimedRE.MatchString(status) {
		t.Errorf("status shows no compaction, or not the bytes it reclaimed:\n%s", status)
	}
	e.alive()
}

// reclaimedRE finds the bytes a compaction reclaimed as compact and status
// print them (describeCompaction): the amount and its unit.
var reclaimedRE = regexp.MustCompile(`, ([0-9.]+) (B|[KMGTPE]iB) reclaimed`)

// TestBackgroundCompaction: with replication.compaction.interval set, a
// running syncpipe compacts by itself — counted on /metrics (ops and bytes
// reclaimed), recorded for status — while a client following the stream validates every
// checkpoint.
func TestBackgroundCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 60, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	e.env = append(e.env, "SYNCPIPE_TELEMETRY__METRICS_LISTEN="+addr, "SYNCPIPE_REPLICATION__COMPACTION__INTERVAL=300ms",
		"SYNCPIPE_REPLICATION__COMPACTION__BATCH_OPS=50")
	want := e.todos(ctx, 1)
	e.start()
	e.waitCaughtUp(ctx)
	w := &switchWatch{}
	c := newSyncClient(e.api, e.token("alice"), w.observe)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.run(cctx)
	for round := range 12 {
		e.exec(ctx, fmt.Sprintf(`UPDATE todos SET description = 'round %d ' || id`, round))
		e.waitCaughtUp(ctx)
	}
	e.waitFor(ctx, "background compaction on /metrics", func() bool {
		ss := scrape(ctx, addr)
		moved, _ := sample(ss, "syncpipe_compaction_ops_total", "kind", "moved")
		cleared, _ := sample(ss, "syncpipe_compaction_ops_total", "kind", "cleared")
		reclaimed, _ := sample(ss, "syncpipe_compaction_reclaimed_bytes_total")
		// A completed run too: the ops count as a run goes, and status
		// shows a compaction once one has completed.
		runs, _ := sample(ss, "syncpipe_compaction_runs_total")
		return moved > 0 && cleared > 0 && reclaimed > 0 && runs > 0
	})
	// Read from storage on scrape and cached for storageGaugeCache: the
	// group's data has been there since the snapshot.
	e.waitFor(ctx, "the group's storage bytes on /metrics", func() bool {
		n, _ := sample(scrape(ctx, addr), "syncpipe_storage_bytes", "group", "1")
		return n > 0
	})
	e.converge(ctx, time.Minute, want)
	e.waitFor(ctx, "the client to hold the source", w.holds(want()))
	if f := c.failures(); len(f) > 0 {
		t.Fatalf("the client saw protocol errors while storage was compacted: %v", f)
	}
	if status := e.runOnce(ctx, "status"); !strings.Contains(status, "group 1 last compacted") {
		t.Errorf("status shows no compaction:\n%s", status)
	}
	e.alive()
}
