package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// metricValue returns the value of an unlabelled metric from the API's
// /metrics ("" if absent).
func metricValue(ctx context.Context, api, name string) string {
	for _, s := range harness.Scrape(ctx, api) {
		if s.Name == name && len(s.Labels) == 0 {
			return strings.TrimPrefix(s.Line, name+" ")
		}
	}
	return ""
}

// TestAPIGracefulShutdown runs the sync API as its own process (`syncpipe
// run --role api`, beside a `--role replication` one) and checks, through
// HTTP only: /healthz and /metrics report a replication error stored in
// storage and its clearing; on SIGTERM the API stops accepting at once,
// an open sync stream, HTTP and WebSocket alike, keeps syncing (it gets a
// change made after the signal) until api.shutdown_timeout, is closed
// then, and the process exits soon after.
func TestAPIGracefulShutdown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 30, Seed: 5}})
	repl := e.StartRole("replication")
	e.WaitCaughtUp(ctx)
	// The grace period is what is tested: the stream must get a change
	// made within it (a commit and a checkpoint, well under 4 s under
	// -race on 2 busy cores) and stay open to its end.
	const grace = 4 * time.Second
	api := e.StartRole("api", fmt.Sprintf("SYNCPIPE_API__SHUTDOWN_TIMEOUT=%s", grace))
	harness.Poll(t, ctx, api, "the API's /healthz", func() bool { code, _ := harness.Health(ctx, e.API); return code == http.StatusOK })

	// A stored replication error: degraded (still 200), counted, cleared.
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: e.StorageURI})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	group := e.ActiveGroup(ctx)
	const msg = "table public.todos has no replica identity: ALTER TABLE public.todos REPLICA IDENTITY DEFAULT"
	if err := store.Catalog().ReportError(ctx, group, msg); err != nil {
		t.Fatal(err)
	}
	harness.Poll(t, ctx, api, "/healthz to report the error", func() bool {
		code, b := harness.Health(ctx, e.API)
		return code == http.StatusOK && b.OK && b.Status == "degraded" &&
			len(b.Reasons) == 1 && b.Reasons[0].Group == group && b.Reasons[0].Error == msg && !b.Reasons[0].Since.IsZero()
	})
	if v := metricValue(ctx, e.API, "syncpipe_replication_group_errors"); v != "1" {
		t.Fatalf("syncpipe_replication_group_errors = %q, want 1", v)
	}
	if err := store.Catalog().ClearError(ctx, group); err != nil {
		t.Fatal(err)
	}
	harness.Poll(t, ctx, api, "/healthz to recover", func() bool {
		code, b := harness.Health(ctx, e.API)
		return code == http.StatusOK && b.Status == "ok"
	})
	if v := metricValue(ctx, e.API, "syncpipe_replication_group_errors"); v != "0" {
		t.Fatalf("syncpipe_replication_group_errors = %q after ClearError, want 0", v)
	}

	s := harness.OpenStream(t, ctx, e.API, e.Token("alice"), "")
	if !s.Until(t, ctx, `"checkpoint_complete"`) {
		t.Fatal("the stream ended before its first checkpoint")
	}
	// A WebSocket stream beside it gets the same grace (lines enough
	// requested that it never waits for credit).
	ws := dialWS(t, ctx, e.API)
	ws.openSDK(ctx, e.Token("alice"), 1000)
	if !ws.until(ctx, "checkpoint_complete") {
		t.Fatal("the WebSocket stream ended before its first checkpoint")
	}
	signalled := time.Now()
	api.Signal(syscall.SIGTERM)
	harness.Poll(t, ctx, nil, "the API to stop accepting connections", func() bool {
		c, err := net.DialTimeout("tcp", e.API, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	e.Exec(ctx, `UPDATE lists SET name = 'renamed during the grace period' WHERE id = (SELECT id FROM lists ORDER BY id LIMIT 1)`)
	if !s.Until(t, ctx, "renamed during the grace period") {
		t.Fatalf("the stream ended %s after SIGTERM, before the change made during the grace period (%s) reached it",
			s.Ended().Sub(signalled), grace)
	}
	if !ws.until(ctx, "renamed during the grace period") {
		t.Fatalf("the WebSocket stream ended %s after SIGTERM, before the change made during the grace period (%s) reached it",
			time.Since(signalled), grace)
	}
	s.Drain(t, ctx)
	if open := s.Ended().Sub(signalled); open < grace {
		t.Fatalf("the stream was closed %s after SIGTERM, within the %s grace period", open, grace)
	}
	ws.untilEnd(ctx)
	if open := time.Since(signalled); open < grace {
		t.Fatalf("the WebSocket stream was closed %s after SIGTERM, within the %s grace period", open, grace)
	}
	// The process exits within the grace period and 15 s of margin.
	select {
	case <-api.Exited():
	case <-time.After(grace + 15*time.Second - time.Since(signalled)):
		t.Fatalf("syncpipe --role api still runs %s after SIGTERM (grace %s)", time.Since(signalled), grace)
	}
	if api.Err() != nil {
		t.Fatalf("syncpipe --role api exited with %v after SIGTERM, want 0", api.Err())
	}
	if !api.Logged("closed 2 sync streams still open at the end of the grace period") {
		t.Errorf("no log line about the stream closed after the grace period:\n%s", e.TailLogs(4<<10))
	}
	if !repl.Running() {
		t.Fatalf("the replication process exited: %v", repl.Err())
	}
}
