package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/logbuf"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// errInjectedAccept is what failingListener's Accept fails with.
var errInjectedAccept = errors.New("injected accept failure")

// failingListener accepts one connection, then fails: a listener whose
// socket broke.
type failingListener struct {
	net.Listener
	accepted bool // only Serve's goroutine calls Accept
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.accepted {
		return nil, errInjectedAccept
	}
	c, err := l.Listener.Accept()
	l.accepted = err == nil
	return c, err
}

// TestAPIFailureStopsRoleAll: under --role all, a sync API whose Serve
// fails after start stops the whole process, replication included, with
// a clear error and exit code 1.
//
// In-process (Main), not the built binary of e2e/api: the failure is
// injected through the wrapAPIListener hook, which the binary does not
// have, and no signal, fd or flag from outside makes a listener's Accept
// fail for good (http.Server retries the temporary errors). Not parallel:
// the hook is package state that any other syncpipe run in this process
// would pick up.
func TestAPIFailureStopsRoleAll(t *testing.T) {
	wrapAPIListener = func(ln net.Listener) net.Listener { return &failingListener{Listener: ln} }
	t.Cleanup(func() { wrapAPIListener = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	if _, err := todos.Load(ctx, pgtest.Connect(t, source), todos.Size{Lists: 3, Todos: 30, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	api := ln.Addr().String()
	ln.Close()
	config := filepath.Join(dir, "syncpipe.yaml")
	for name, content := range map[string]string{
		"rules.yaml": todos.Rules,
		"syncpipe.yaml": fmt.Sprintf(`source: {uri: %q}
storage: {uri: %q}
sync_rules: {path: rules.yaml}
replication:
  workers_per_process: 2
  stream: {batch_max_wait: 20ms}
api:
  listen: %s
  auth: {audience: [syncpipe], hs256_secrets: ["a-long-random-secret-for-the-stream-tests"]}
  shutdown_timeout: 2s
telemetry: {metrics_listen: ""}
log: {level: info, format: json}
`, source, storage, api),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stderr logbuf.Buffer
	exited := make(chan int, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		exited <- Main(runCtx, []string{"run", "--config", config, "--role", "all"}, &bytes.Buffer{}, &stderr)
	}()
	t.Cleanup(func() { // a failed test leaves no run behind for the next
		stop()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Error("syncpipe run did not return 30 s after its context ended")
		}
	})

	// The first connection is served; the listener fails right after it.
	code := -1
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for served := false; !served; {
		select {
		case code = <-exited:
			exited <- code // for the cleanup
			served = true  // the probe may not get its answer before the exit
		case <-ctx.Done():
			t.Fatalf("waiting for the API: %v", ctx.Err())
		case <-tick.C:
			cn, err := net.DialTimeout("tcp", api, time.Second)
			if err == nil {
				cn.Close()
				served = true
			}
		}
	}
	if code < 0 {
		select {
		case code = <-exited:
			exited <- code
		case <-time.After(30 * time.Second):
			t.Fatalf("syncpipe --role all still runs 30s after its API failed:\n%s", lastBytes(stderr.String(), 4<<10))
		}
	}
	if code != ExitFailure {
		t.Fatalf("exit status %d, want %d", code, ExitFailure)
	}
	want := "syncpipe run: the sync API stopped serving: " + errInjectedAccept.Error()
	if logs := stderr.String(); !strings.Contains(logs, want) {
		t.Fatalf("stderr lacks %q:\n%s", want, lastBytes(logs, 4<<10))
	}
	if logs := stderr.String(); !strings.Contains(logs, "sync API failed: stopping replication") {
		t.Errorf("no log line saying replication stops with the API:\n%s", lastBytes(logs, 4<<10))
	}
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
