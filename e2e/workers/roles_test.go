package workers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRolesAreStrict: a `replication:streaming` process alone on a new
// group snapshots nothing and says it waits; a `replication:snapshot`
// process started next does the whole snapshot and never streams; the
// streaming process then streams, and storage follows the source.
func TestRolesAreStrict(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 5, Todos: 500, Seed: 5},
		Env:  []string{"SYNCPIPE_REPLICATION__LEASE__HEARTBEAT=1s", "SYNCPIPE_REPLICATION__LEASE__DURATION=3s"},
	})
	streamer := e.StartRole("replication:streaming")
	streamer.WaitLogged(ctx, "this process only streams: waiting for a replication:snapshot process")
	// status says what is missing.
	if code, out, errOut := harness.Run(t, ctx, "status", "--config", e.Config); code != 0 ||
		!strings.Contains(out, "snapshot units wait and no process works on them") {
		t.Errorf("status (exit %d) does not say the snapshot waits for a worker:\n%s%s", code, out, errOut)
	}
	snapshotter := e.StartRole("replication:snapshot")
	streamer.WaitLogged(ctx, `"msg":"streaming from the replication slot"`)
	e.Exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 20)")
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	if n := streamer.Count(`"msg":"snapshot range done"`); n > 0 {
		t.Errorf("the replication:streaming process snapshotted %d ranges", n)
	}
	if n := snapshotter.Count(`"msg":"snapshot range done"`); n == 0 {
		t.Error("the replication:snapshot process snapshotted nothing")
	}
	if n := snapshotter.Count(`"msg":"streaming from the replication slot"`); n > 0 {
		t.Error("the replication:snapshot process streamed")
	}
}
