package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/rsocketclient"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// The WebSocket transport (issue 43) through the binary: a `syncpipe
// run` child on real PostgreSQL, spoken to with RSocket frames
// (wsclient_test.go).

// holdStream opens an HTTP sync stream (POST /sync/stream) on ctx and
// returns its status; a 200's body stays open until ctx ends (the
// stream holds its slot until then), any other is read and returned.
func holdStream(t testing.TB, ctx context.Context, api, tok string) (status int, body string) {
	t.Helper()
	resp, err := harness.PostStream(ctx, api, tok, "")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp.StatusCode, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// admitted opens a WebSocket stream and reports whether its SETUP was
// accepted (its first line came) or refused for too many connections;
// any other answer fails the test.
func admitted(t testing.TB, ctx context.Context, api, tok string) (*wsClient, bool) {
	t.Helper()
	c := dialWS(t, ctx, api)
	c.openSDK(ctx, tok, 10)
	f, err := c.frame(ctx)
	switch {
	case err != nil:
		t.Fatalf("connection ended before its first frame: %v", err)
	case f.Type == rsocket.TypePayload && f.Flags&rsocket.FlagNext != 0:
		return c, true
	case tooMany(f):
		if code := c.closed(ctx); code != websocket.StatusNormalClosure {
			t.Errorf("refused SETUP closed with %v, want 1000", code)
		}
		return c, false
	}
	t.Fatalf("first frame %v (stream %d, code %v, %q), want a line or PSYNC_S2304", f.Type, f.StreamID, f.Code, f.Data)
	return nil, false
}

// TestWebSocketConnectionLimit: api.max_concurrent_connections counts
// WebSocket and HTTP streams together, through the binary. With N
// WebSocket streams open, the next WebSocket SETUP gets PSYNC_S2304 in an
// ERROR frame, and an HTTP stream a 429. A CANCEL frees its stream's slot
// at once, its connection still open: the next WebSocket stream is
// admitted; after another CANCEL an HTTP stream is, and then, N-1
// WebSocket streams and one HTTP stream open, the next of either is
// refused. (An admission right after a CANCEL is retried once, for the
// instant between the server's reading the CANCEL and its stream's end;
// without the CANCEL no slot would come free for the 90 s lifetime.)
func TestWebSocketConnectionLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const limit = 3
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 2, Todos: 20, Seed: 1},
		API:  fmt.Sprintf("max_concurrent_connections: %d", limit),
	})
	e.Start()
	e.WaitCaughtUp(ctx)
	tok := e.Token("u1")

	var streams []*wsClient
	for range limit {
		c := dialWS(t, ctx, e.API)
		c.openSDK(ctx, tok, 10)
		c.untilComplete(ctx)
		streams = append(streams, c)
	}
	refused := func(open string) {
		t.Helper()
		over := dialWS(t, ctx, e.API)
		over.openSDK(ctx, tok, 10)
		f, code := over.refused(ctx)
		if !tooMany(f) {
			t.Errorf("WebSocket beyond the limit (%s open): ERROR %v on stream %d %q, want REJECTED_SETUP on 0 [PSYNC_S2304]", open, f.Code, f.StreamID, f.Data)
		}
		t.Logf("WebSocket beyond the limit (%s open): ERROR %v %q, close %v", open, f.Code, f.Data, code)
		if status, body := holdStream(t, ctx, e.API, tok); status != http.StatusTooManyRequests || !strings.Contains(body, "PSYNC_S2304") {
			t.Errorf("HTTP stream beyond the limit (%s open): %d %s, want 429 PSYNC_S2304", open, status, body)
		}
	}
	refused(fmt.Sprintf("%d WebSocket", limit))

	// cancelStream sends a CANCEL, and a KEEPALIVE answered after it: the
	// server has read the CANCEL. The connection stays open.
	cancelStream := func(c *wsClient) time.Time {
		t.Helper()
		c.send(ctx, rsocketclient.Cancel(1))
		if n := c.pong(ctx, "after cancel"); n != 0 {
			t.Errorf("%d PAYLOADs after the CANCEL, want none", n)
		}
		return time.Now()
	}
	cancelled := cancelStream(streams[0])
	c, ok := admitted(t, ctx, e.API, tok)
	if !ok {
		t.Log("the first SETUP after the CANCEL was refused; retrying once")
		c, ok = admitted(t, ctx, e.API, tok)
	}
	if !ok {
		t.Fatalf("the slot of the cancelled stream was not free %s after its CANCEL", time.Since(cancelled).Round(time.Millisecond))
	}
	t.Logf("a WebSocket stream was admitted %s after the CANCEL", time.Since(cancelled).Round(time.Millisecond))
	c.untilComplete(ctx)

	cancelled = cancelStream(streams[1])
	status, body := holdStream(t, ctx, e.API, tok)
	if status == http.StatusTooManyRequests {
		t.Log("the first HTTP stream after the CANCEL was refused; retrying once")
		status, body = holdStream(t, ctx, e.API, tok)
	}
	if status != http.StatusOK {
		t.Fatalf("HTTP stream after a CANCEL: %d %s, want 200", status, body)
	}
	t.Logf("an HTTP stream was admitted %s after the CANCEL", time.Since(cancelled).Round(time.Millisecond))
	refused(fmt.Sprintf("%d WebSocket + 1 HTTP", limit-1))
}

// TestWebSocketMetrics: the binary's /metrics counts open streams by
// transport (syncpipe_concurrent_connections{transport}) and the bytes
// a WebSocket stream sends under transport="websocket"
// (syncpipe_sync_sent_bytes_total), growing as it sends more lines.
func TestWebSocketMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := harness.FreeAddr(t)
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 2, Todos: 20, Seed: 1},
		Env:  []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + addr},
	})
	e.Start()
	e.WaitCaughtUp(ctx)
	tok := e.Token("u1")
	var ws []*wsClient
	for range 2 {
		c := dialWS(t, ctx, e.API)
		c.openSDK(ctx, tok, 10)
		c.untilComplete(ctx)
		ws = append(ws, c)
	}
	httpCtx, closeHTTP := context.WithCancel(ctx)
	defer closeHTTP()
	if status, body := holdStream(t, httpCtx, e.API, tok); status != http.StatusOK {
		t.Fatalf("HTTP stream: %d %s", status, body)
	}
	gauge := func(ss []harness.Series, transport string) float64 {
		v, _ := harness.Sample(ss, "syncpipe_concurrent_connections", "transport", transport)
		return v
	}
	sent := func(ss []harness.Series) float64 {
		v, _ := harness.Sample(ss, "syncpipe_sync_sent_bytes_total", "transport", "websocket",
			"content_type", "application/vnd.powersync.bson-stream", "content_encoding", "identity")
		return v
	}
	ss := harness.Scrape(ctx, addr)
	for _, s := range ss {
		if s.Name == "syncpipe_concurrent_connections" || s.Name == "syncpipe_sync_sent_bytes_total" {
			t.Log(s.Line)
		}
	}
	if w, h := gauge(ss, "websocket"), gauge(ss, "http"); w != 2 || h != 1 {
		t.Errorf("syncpipe_concurrent_connections websocket %v, http %v; want 2 and 1", w, h)
	}
	before := sent(ss)
	if before <= 0 {
		t.Errorf("syncpipe_sync_sent_bytes_total{transport=websocket} %v after two first syncs, want > 0", before)
	}

	// A change: each WebSocket stream sends its checkpoint lines.
	e.Exec(ctx, `UPDATE todos SET description = 'changed' WHERE id = (SELECT min(id::text)::uuid FROM todos)`)
	for _, c := range ws {
		c.untilComplete(ctx)
	}
	e.WaitFor(ctx, "more WebSocket bytes sent on /metrics", func() bool {
		ss = harness.Scrape(ctx, addr)
		return sent(ss) > before
	})
	t.Logf("WebSocket bytes sent: %v, then %v after a change", before, sent(ss))

	// Streams that end leave the gauges.
	_ = ws[0].ws.Close(websocket.StatusNormalClosure, "")
	closeHTTP()
	e.WaitFor(ctx, "the ended streams off syncpipe_concurrent_connections", func() bool {
		ss = harness.Scrape(ctx, addr)
		return gauge(ss, "websocket") == 1 && gauge(ss, "http") == 0
	})
}

// TestWebSocketDeflate: the binary takes per-message deflate from a
// client that offers it (as @powersync/node's does): the client syncs,
// and /metrics counts its bytes under content_encoding="deflate".
func TestWebSocketDeflate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := harness.FreeAddr(t)
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 2, Todos: 200, Seed: 2},
		Env:  []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + addr},
	})
	e.Start()
	e.WaitCaughtUp(ctx)
	c := dialWSWith(t, ctx, e.API, &websocket.DialOptions{CompressionMode: websocket.CompressionNoContextTakeover})
	c.openSDK(ctx, e.Token("u1"), 1000)
	if n := c.untilComplete(ctx); n < 3 {
		t.Fatalf("%d lines to the first checkpoint_complete, want a checkpoint, data and its end", n)
	}
	e.WaitFor(ctx, "deflate bytes on /metrics", func() bool {
		v, _ := harness.Sample(harness.Scrape(ctx, addr), "syncpipe_sync_sent_bytes_total", "transport", "websocket",
			"content_type", "application/vnd.powersync.bson-stream", "content_encoding", "deflate")
		return v > 0
	})
}

// TestWebSocketKeepalive: the keepalive interval and lifetime a SETUP
// gives are honoured by the binary. A client that SETUPs with 1 s and 3 s
// and then sends nothing gets an ERROR CONNECTION_ERROR on stream 0 and a
// close 1008 once the lifetime has passed (as syncapi's in-process
// TestWebSocketKeepalive expects); one that sends a KEEPALIVE each
// second keeps its stream past the lifetime, and a change still reaches
// it.
func TestWebSocketKeepalive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const keepalive, lifetime = time.Second, 3 * time.Second
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 2, Todos: 20, Seed: 1}})
	e.Start()
	e.WaitCaughtUp(ctx)
	tok := e.Token("u1")

	kept := dialWS(t, ctx, e.API)
	keptSetup := time.Now()
	kept.open(ctx, tok, 10, uint32(keepalive.Milliseconds()), uint32(lifetime.Milliseconds()))
	kctx, stopKeepalive := context.WithCancel(ctx)
	keeping := make(chan struct{})
	go func() { // as the SDK does, every interval
		defer close(keeping)
		tick := time.NewTicker(keepalive)
		defer tick.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-tick.C:
				if err := kept.ws.Write(kctx, websocket.MessageBinary, rsocketclient.Keepalive("")); err != nil && kctx.Err() == nil {
					t.Errorf("send a KEEPALIVE: %v", err)
					return
				}
			}
		}
	}()
	defer func() { stopKeepalive(); <-keeping }()

	silent := dialWS(t, ctx, e.API)
	silentSetup := time.Now()
	silent.open(ctx, tok, 10, uint32(keepalive.Milliseconds()), uint32(lifetime.Milliseconds()))
	silent.untilComplete(ctx)
	// Lines may come meanwhile (token_expires_in): the wait for the ERROR
	// is bounded as a whole.
	wctx, stopWait := context.WithTimeout(ctx, lifetime+10*time.Second)
	defer stopWait()
	for {
		f, err := silent.frame(wctx)
		if err != nil {
			t.Fatalf("the silent client's connection did not end with an ERROR %s after its SETUP: %v", time.Since(silentSetup).Round(time.Millisecond), err)
		}
		if f.Type != rsocket.TypeError {
			continue // a line (token_expires_in, say)
		}
		if f.StreamID != 0 || f.Code != rsocket.CodeConnectionError {
			t.Errorf("ERROR %v on stream %d %q, want CONNECTION_ERROR on 0", f.Code, f.StreamID, f.Data)
		}
		break
	}
	closedAfter := time.Since(silentSetup)
	if code := silent.closed(ctx); code != websocket.StatusPolicyViolation {
		t.Errorf("the silent client's connection closed with %v, want 1008", code)
	}
	t.Logf("the silent client was closed %s after its SETUP (lifetime %s)", closedAfter.Round(time.Millisecond), lifetime)
	if closedAfter < lifetime-100*time.Millisecond {
		t.Errorf("the silent client was closed %s after its SETUP, want about its lifetime %s", closedAfter, lifetime)
	}

	// The kept stream outlives its lifetime: the time passing is the
	// test's subject.
	kept.untilComplete(ctx)
	time.Sleep(time.Until(keptSetup.Add(lifetime + keepalive)))
	e.Exec(ctx, `UPDATE todos SET description = 'changed' WHERE id = (SELECT min(id::text)::uuid FROM todos)`)
	kept.untilComplete(ctx)
	t.Logf("the client sending KEEPALIVEs still streams %s after its SETUP", time.Since(keptSetup).Round(time.Millisecond))
}
