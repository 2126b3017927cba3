package crash

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestDemoStopLogsNoWarning: Ctrl-C (SIGINT) of `syncpipe demo` while it
// streams is an ordinary stop and logs no WARN or ERROR. Each leased unit
// gives its lease up as it stops; the demo closed storage without waiting
// for replication to stop, so every stop logged "cannot release a lease …
// closed pool".
func TestDemoStopLogsNoWarning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := harness.Start(t, harness.ProcConfig{Args: []string{"demo", "--lists", "5", "--todos", "50"}})
	// The stream holds its lease from here on: the stop releases it.
	p.WaitLogged(ctx, `"msg":"streaming from the replication slot"`)
	p.Signal(syscall.SIGINT)
	if code := p.Wait(ctx); code != 0 {
		t.Fatalf("demo: exit %d (%v); stderr:\n%s", code, p.Err(), p.Logs())
	}
	logs := strings.Split(p.Logs(), "\n")
	stopped := false
	for _, l := range logs {
		stopped = stopped || strings.Contains(l, `"msg":"postgres stopped"`)
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("a clean stop logged: %s", l)
		}
	}
	if !stopped {
		t.Errorf("the demo did not stop its cluster; stderr:\n%s", strings.Join(logs, "\n"))
	}
}

// TestRunStopLogsNoWarning: SIGTERM of `syncpipe run` (role all) while it
// streams to a sync client is an ordinary stop and logs no WARN or ERROR:
// replication has stopped, its leases given up, before storage closes.
func TestRunStopLogsNoWarning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 60, Seed: 8}})
	p := e.Start()
	var w harness.CheckpointWatch
	e.Sync("alice", w.Observe)
	e.Exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)")
	e.WaitFor(ctx, "the client to hold the source", w.Holds(e.Todos(ctx, 1)()))
	if err := p.Stop(); err != nil {
		t.Fatalf("syncpipe exited with %v after SIGTERM", err)
	}
	logs := p.Logs()
	if !strings.Contains(logs, `"msg":"syncpipe stopped"`) {
		t.Fatalf("no \"syncpipe stopped\" after SIGTERM; logs:\n%s", logs)
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("a clean stop logged: %s", l)
		}
	}
}
