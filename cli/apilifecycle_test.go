package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// startRole runs `syncpipe run --config F --role role` as a child process,
// its logs collected with e's, with extra environment variables. The
// child is killed at the end of the test if it still runs.
func (e *streamEnv) startRole(role string, env ...string) *child {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...),
		childEnv+"="+strings.Join([]string{"run", "--config", e.config, "--role", role}, "\x1f"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			e.mu.Lock()
			e.logs.WriteString(role + ": ")
			e.logs.Write(sc.Bytes())
			e.logs.WriteByte('\n')
			e.mu.Unlock()
		}
		c.err = cmd.Wait()
		close(c.exited)
	}()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-c.exited
	})
	return c
}

// poll checks cond every 20 ms until it holds, failing when ctx ends or
// c (if any) exits.
func poll(t *testing.T, ctx context.Context, c *child, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		var exited <-chan struct{}
		if c != nil {
			exited = c.exited
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-exited:
			t.Fatalf("waiting for %s: syncpipe exited: %v", what, c.err)
		case <-tick.C:
		}
	}
}

// getHealth reads the API's /healthz; code 0 when it does not answer.
func getHealth(ctx context.Context, api string) (code int, body struct {
	OK      bool   `json:"ok"`
	Status  string `json:"status"`
	Reasons []struct {
		Group int       `json:"group"`
		Error string    `json:"error"`
		Since time.Time `json:"since"`
	} `json:"reasons"`
}) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+api+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, body
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// metricValue returns the value of an unlabelled metric from the API's
// /metrics ("" if absent).
func metricValue(ctx context.Context, api, name string) string {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+api+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// rawStream is an open /sync/stream read line by line.
type rawStream struct {
	lines chan string // closed at the end of the stream
	ended time.Time   // when the body ended; read after lines is closed
}

func openRawStream(t *testing.T, ctx context.Context, api, token string) *rawStream {
	t.Helper()
	return openRawStreamWith(t, ctx, api, token, `{"raw_data":true}`)
}

// openRawStreamWith is openRawStream with the request body body.
func openRawStreamWith(t *testing.T, ctx context.Context, api, token, body string) *rawStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api+"/sync/stream", strings.NewReader(body))
	req.Header.Set("Authorization", "Token "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("sync stream: HTTP %d: %s", resp.StatusCode, b)
	}
	s := &rawStream{lines: make(chan string, 4096)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		s.ended = time.Now()
		close(s.lines)
	}()
	return s
}

// until reads lines until one contains want; ok is false if the stream
// ended first.
func (s *rawStream) until(t *testing.T, ctx context.Context, want string) (ok bool) {
	t.Helper()
	for {
		select {
		case l, open := <-s.lines:
			if !open {
				return false
			}
			if strings.Contains(l, want) {
				return true
			}
		case <-ctx.Done():
			t.Fatalf("waiting for a stream line with %q: %v", want, ctx.Err())
		}
	}
}

// drain reads until the server ends the stream.
func (s *rawStream) drain(t *testing.T, ctx context.Context) {
	t.Helper()
	for {
		select {
		case _, open := <-s.lines:
			if !open {
				return
			}
		case <-ctx.Done():
			t.Fatalf("waiting for the server to end the stream: %v", ctx.Err())
		}
	}
}

// TestAPIGracefulShutdown runs the sync API as its own process (`syncpipe
// run --role api`, beside a `--role replication` one) and checks, through
// HTTP only: /healthz and /metrics report a replication error stored in
// storage and its clearing; on SIGTERM the API stops accepting at once,
// an open sync stream keeps syncing (it gets a change made after the
// signal) until api.shutdown_timeout, is closed then, and the process
// exits soon after.
func TestAPIGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 30, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	repl := e.startRole("replication")
	e.waitCaughtUp(ctx)
	const grace = 4 * time.Second
	api := e.startRole("api", fmt.Sprintf("SYNCPIPE_API__SHUTDOWN_TIMEOUT=%s", grace))
	poll(t, ctx, api, "the API's /healthz", func() bool { code, _ := getHealth(ctx, e.api); return code == http.StatusOK })

	// A stored replication error: degraded (still 200), counted, cleared.
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: e.storage.Config().ConnConfig.ConnString()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	group := e.activeGroup(ctx)
	const msg = "table public.todos has no replica identity: ALTER TABLE public.todos REPLICA IDENTITY DEFAULT"
	if err := store.ReportError(ctx, group, msg); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, api, "/healthz to report the error", func() bool {
		code, b := getHealth(ctx, e.api)
		return code == http.StatusOK && b.OK && b.Status == "degraded" &&
			len(b.Reasons) == 1 && b.Reasons[0].Group == group && b.Reasons[0].Error == msg && !b.Reasons[0].Since.IsZero()
	})
	if v := metricValue(ctx, e.api, "syncpipe_replication_group_errors"); v != "1" {
		t.Fatalf("syncpipe_replication_group_errors = %q, want 1", v)
	}
	if err := store.ClearError(ctx, group); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, api, "/healthz to recover", func() bool { code, b := getHealth(ctx, e.api); return code == http.StatusOK && b.Status == "ok" })
	if v := metricValue(ctx, e.api, "syncpipe_replication_group_errors"); v != "0" {
		t.Fatalf("syncpipe_replication_group_errors = %q after ClearError, want 0", v)
	}

	s := openRawStream(t, ctx, e.api, e.token("alice"))
	if !s.until(t, ctx, `"checkpoint_complete"`) {
		t.Fatal("the stream ended before its first checkpoint")
	}
	signalled := time.Now()
	if err := api.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, nil, "the API to stop accepting connections", func() bool {
		c, err := net.DialTimeout("tcp", e.api, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	e.exec(ctx, `UPDATE lists SET name = 'renamed during the grace period' WHERE id = (SELECT id FROM lists ORDER BY id LIMIT 1)`)
	if !s.until(t, ctx, "renamed during the grace period") {
		t.Fatalf("the stream ended %s after SIGTERM, before the change made during the grace period (%s) reached it",
			s.ended.Sub(signalled), grace)
	}
	s.drain(t, ctx)
	if open := s.ended.Sub(signalled); open < grace {
		t.Fatalf("the stream was closed %s after SIGTERM, within the %s grace period", open, grace)
	}
	select {
	case <-api.exited:
	case <-time.After(grace + 15*time.Second - time.Since(signalled)):
		t.Fatalf("syncpipe --role api still runs %s after SIGTERM (grace %s)", time.Since(signalled), grace)
	}
	if api.err != nil {
		t.Fatalf("syncpipe --role api exited with %v after SIGTERM, want 0", api.err)
	}
	if !e.logged("closed 1 sync streams still open at the end of the grace period") {
		t.Errorf("no log line about the stream closed after the grace period:\n%s", e.tailLogs(4<<10))
	}
	select {
	case <-repl.exited:
		t.Fatalf("the replication process exited: %v", repl.err)
	default:
	}
}
