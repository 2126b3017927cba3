package cli

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRolesAreStrict: a `replication:streaming` process alone on a new
// group snapshots nothing and says it waits; a `replication:snapshot`
// process started next does the whole snapshot and never streams; the
// streaming process then streams, and storage follows the source.
func TestRolesAreStrict(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules, env: []string{"SYNCPIPE_REPLICATION__LEASE__HEARTBEAT=1s",
		"SYNCPIPE_REPLICATION__LEASE__DURATION=3s"}})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 5, Todos: 500, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	streamer := e.startWith(nil, "--role", "replication:streaming")
	e.child = nil
	t.Cleanup(func() {
		_ = streamer.cmd.Process.Signal(syscall.SIGTERM)
		<-streamer.exited
	})
	e.waitFor(ctx, "the streaming process to wait for a snapshot process", func() bool {
		return streamer.count("this process only streams: waiting for a replication:snapshot process") > 0
	})
	// status says what is missing.
	if code, out, errOut := runCLI(t, "status", "--config", e.config); code != 0 ||
		!strings.Contains(out, "snapshot units wait and no process works on them") {
		t.Errorf("status (exit %d) does not say the snapshot waits for a worker:\n%s%s", code, out, errOut)
	}
	snapshotter := e.startWith(nil, "--role", "replication:snapshot")
	e.child = nil
	t.Cleanup(func() {
		_ = snapshotter.cmd.Process.Signal(syscall.SIGTERM)
		<-snapshotter.exited
	})
	e.waitFor(ctx, "the streaming process to stream", func() bool {
		return streamer.count(`"msg":"streaming from the replication slot"`) > 0
	})
	e.exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 20)")
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	if n := streamer.count(`"msg":"snapshot range done"`); n > 0 {
		t.Errorf("the replication:streaming process snapshotted %d ranges", n)
	}
	if n := snapshotter.count(`"msg":"snapshot range done"`); n == 0 {
		t.Error("the replication:snapshot process snapshotted nothing")
	}
	if n := snapshotter.count(`"msg":"streaming from the replication slot"`); n > 0 {
		t.Error("the replication:snapshot process streamed")
	}
}
