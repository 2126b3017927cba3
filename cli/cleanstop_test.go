package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestDemoStopLogsNoWarning: Ctrl-C (SIGINT) of `syncpipe demo` while it
// streams is an ordinary stop and logs no WARN or ERROR. Each leased unit
// gives its lease up as it stops; the demo closed storage without waiting
// for replication to stop, so every stop logged "cannot release a lease …
// closed pool".
func TestDemoStopLogsNoWarning(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a syncpipe process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{"demo", "--lists", "5", "--todos", "50"}, "\x1f"))
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	var logs []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		logs = append(logs, sc.Text())
		// The stream holds its lease from here on: the stop releases it.
		if strings.Contains(sc.Text(), `"msg":"streaming from the replication slot"`) {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo: %v; stderr:\n%s", err, strings.Join(logs, "\n"))
	}
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
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 60, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	c := e.start()
	client := &switchWatch{}
	cctx, stopClient := context.WithCancel(ctx)
	defer stopClient()
	go newSyncClient(e.api, e.token("alice"), client.observe).run(cctx)
	e.exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)")
	e.waitFor(ctx, "the client to hold the source", client.holds(e.todos(ctx, 1)()))
	e.stop()
	if c.err != nil {
		t.Fatalf("syncpipe exited with %v after SIGTERM", c.err)
	}
	c.mu.Lock()
	logs := c.logs.String()
	c.mu.Unlock()
	if !strings.Contains(logs, `"msg":"syncpipe stopped"`) {
		t.Fatalf("no \"syncpipe stopped\" after SIGTERM; logs:\n%s", logs)
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("a clean stop logged: %s", l)
		}
	}
}
