package syncapi

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// The WebSocket transport's tests run on the fake storage (no
// PostgreSQL) with a real WebSocket client speaking RSocket frames
// (wsclient_test.go).

// todoChanges commits lists and todos of u1 (and one list of u2's).
func todoChanges(e *fakeEnv, todos int) {
	changes := []model.Change{
		e.upsert("lists", "a", "Groceries", "u1"),
		e.upsert("lists", "b", "Work", "u2"),
		e.upsert("lists", "e", "Empty", "u1"),
	}
	for i := range todos {
		changes = append(changes, e.upsert("todos", fmt.Sprintf("t%d", i), "a", fmt.Sprintf("todo %d <&>", i)))
	}
	e.commit(changes...)
}

// normalized is a line as JSON without its raw text, for comparing the
// lines of the two transports.
func normalized(t *testing.T, ls []line) []string {
	t.Helper()
	var out []string
	for _, l := range ls {
		l.Raw = ""
		if l.Checkpoint != nil { // in no particular order
			slices.SortFunc(l.Checkpoint.Buckets, func(a, b bucketJSON) int { return strings.Compare(a.Bucket, b.Bucket) })
		}
		if l.Data != nil {
			for i := range l.Data.Data {
				var v any // the op's data, whatever its escaping
				if err := json.Unmarshal(l.Data.Data[i].Data, &v); err != nil {
					t.Fatal(err)
				}
				l.Data.Data[i].Data, _ = json.Marshal(v)
			}
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return out
}

// TestWebSocketFirstSyncEqualsHTTP: a first sync over WebSocket is the
// HTTP stream's, line for line (the same checkpoint, data and
// checksums), each line a BSON PAYLOAD; the checksums check out.
func TestWebSocketFirstSyncEqualsHTTP(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	todoChanges(e, 5)
	tok := token(t, "u1", nil)
	httpLines := e.open(tok, nil).untilComplete()

	c := dialWS(t, e.http.URL)
	c.open(tok, 10, nil)
	first, _ := c.next()
	if first.TokenExpiresIn == nil || *first.TokenExpiresIn < 3590 {
		t.Fatalf("first line %s, want token_expires_in ≈ 3600", first.Raw)
	}
	wsLines := c.untilComplete()
	if got, want := normalized(t, wsLines), normalized(t, httpLines); !slices.Equal(got, want) {
		t.Fatalf("WebSocket lines\n%s\nwant HTTP's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	sc := newClient(t)
	sc.apply(wsLines...) // every bucket's checksum and count
	if sc.ops != 8 {
		t.Errorf("%d ops, want 8 (3 lists in the global bucket, 5 todos)", sc.ops)
	}
}

// TestWebSocketCredit: the server sends no PAYLOAD beyond the credit.
// With REQUEST_N 1 at a time, after each line the stream waits for
// credit, and a KEEPALIVE sent then is answered before anything else: no
// line was sent ahead of it.
func TestWebSocketCredit(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{}, 1)
	e := newFakeEnv(t, todoRules, todoTables, nil)
	e.srv.waitCredit = func() {
		select {
		case waiting <- struct{}{}:
		default: // a wait after a stale wake-up: one signal is enough
		}
	}
	todoChanges(e, 5)
	c := dialWS(t, e.http.URL)
	c.open(token(t, "u1", nil), 1, nil)
	var kindsSeen []string
	for i := 0; ; i++ {
		l, ok := c.next()
		if !ok {
			t.Fatal("stream completed")
		}
		kindsSeen = append(kindsSeen, l.kind())
		if l.CheckpointComplete != nil {
			break
		}
		waitSignal(t, waiting) // the next line waits for credit
		probe := fmt.Sprintf("probe %d", i)
		c.send(keepaliveFrame(probe))
		f, err := c.frame()
		if err != nil || f.Type != rsocket.TypeKeepalive || f.Flags&rsocket.FlagRespond != 0 || string(f.Data) != probe {
			t.Fatalf("after line %d (%v): frame %v %q, %v; want the KEEPALIVE answer %q first: a line was sent without credit",
				i, kindsSeen, f.Type, f.Data, err, probe)
		}
		c.send(requestNFrame(1))
	}
	if want := []string{"token_expires_in", "checkpoint", "data", "data", "checkpoint_complete"}; !slices.Equal(kindsSeen, want) {
		t.Errorf("lines %v, want %v", kindsSeen, want)
	}
}

// TestWebSocketCancelFreesSlot: at max_concurrent_connections 1 a second
// connection is refused with PSYNC_S2304 in an ERROR REJECTED_SETUP;
// once the first stream is cancelled, its slot is free at once and a new
// connection syncs.
func TestWebSocketCancelFreesSlot(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.MaxConcurrentConnections = 1 })
	ended := make(chan struct{}, 4)
	e.srv.streamDone = func() { ended <- struct{}{} }
	todoChanges(e, 2)
	tok := token(t, "u1", nil)
	first := dialWS(t, e.http.URL)
	first.open(tok, 10, nil)
	first.untilComplete()

	second := dialWS(t, e.http.URL)
	second.open(tok, 10, nil)
	f := second.refused()
	if f.StreamID != 0 || f.Code != rsocket.CodeRejectedSetup || !strings.HasPrefix(string(f.Data), "["+codeTooManyConns+"] ") {
		t.Fatalf("second connection: ERROR %v on %d %q, want REJECTED_SETUP on 0 [%s]", f.Code, f.StreamID, f.Data, codeTooManyConns)
	}

	first.send(cancelFrame())
	waitSignal(t, ended)
	// Nothing follows a CANCEL on its stream (no COMPLETE, no ERROR): a
	// KEEPALIVE is answered first. The client then closes, as the SDK does.
	first.send(keepaliveFrame("after cancel"))
	if f, err := first.frame(); err != nil || f.Type != rsocket.TypeKeepalive || string(f.Data) != "after cancel" {
		t.Fatalf("after CANCEL: frame %v %q, %v; want the KEEPALIVE answer", f.Type, f.Data, err)
	}
	_ = first.ws.Close(websocket.StatusNormalClosure, "")
	third := dialWS(t, e.http.URL)
	third.open(tok, 10, nil)
	if ls := third.untilComplete(); ls[0].Checkpoint == nil {
		t.Fatalf("lines %v after the cancel", kinds(ls))
	}
}

// TestWebSocketSetupRefused: a bad or missing token is an ERROR
// REJECTED_SETUP on stream 0 carrying its PSYNC code, then the close.
func TestWebSocketSetupRefused(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	for _, tc := range []struct{ name, tok, code string }{
		{"bad token", token(t, "u1", nil) + "x", codeAuthGeneric},
		{"missing token", "", codeAuthMissing},
		{"expired", token(t, "u1", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), codeAuthExpired},
	} {
		c := dialWS(t, e.http.URL)
		c.open(tc.tok, 10, nil)
		f := c.refused()
		if f.StreamID != 0 || f.Code != rsocket.CodeRejectedSetup || !strings.HasPrefix(string(f.Data), "["+tc.code+"] ") {
			t.Errorf("%s: ERROR %v on %d %q, want REJECTED_SETUP on 0 [%s]", tc.name, f.Code, f.StreamID, f.Data, tc.code)
		}
	}
}

// TestWebSocketHostileInput: a malformed frame, a frame before the
// SETUP, an unknown frame type, a text message get an ERROR on stream 0
// and a close frame; an oversized message closes with 1009, a client
// that sends no SETUP in time with 1008.
func TestWebSocketHostileInput(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
		c.MaxRequestBytes = 1 << 10
		c.BodyReadTimeout = 200 * time.Millisecond
	})
	tok := token(t, "u1", nil)
	for _, tc := range []struct {
		name   string
		frames [][]byte
		code   rsocket.ErrorCode
	}{
		{"truncated header", [][]byte{{0, 0, 0}}, rsocket.CodeConnectionError},
		{"REQUEST_N before SETUP", [][]byte{requestNFrame(1)}, rsocket.CodeInvalidSetup},
		{"REQUEST_STREAM before SETUP", [][]byte{requestStreamFrame(t, 1, nil)}, rsocket.CodeInvalidSetup},
		{"version 2.0", [][]byte{append(header(0, rsocket.TypeSetup, 0), 0, 2, 0, 0)}, rsocket.CodeUnsupportedSetup},
		{"unknown type after SETUP", [][]byte{setupFrame(tok, 20000, 90000), header(0, 0x30, 0)}, rsocket.CodeConnectionError},
		{"second SETUP", [][]byte{setupFrame(tok, 20000, 90000), requestStreamFrame(t, 10, nil), setupFrame(tok, 20000, 90000)}, rsocket.CodeConnectionError},
		{"REQUEST_STREAM on an even stream", [][]byte{setupFrame(tok, 20000, 90000), onStream(2, requestStreamFrame(t, 1, nil))}, rsocket.CodeConnectionError},
	} {
		c := dialWS(t, e.http.URL)
		for _, f := range tc.frames {
			c.send(f)
		}
		if f := c.refused(); f.StreamID != 0 || f.Code != tc.code {
			t.Errorf("%s: ERROR %v on stream %d (%q), want %v on 0", tc.name, f.Code, f.StreamID, f.Data, tc.code)
		}
	}

	c := dialWS(t, e.http.URL)
	if err := c.ws.Write(c.ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if f := c.refused(); f.Code != rsocket.CodeConnectionError {
		t.Errorf("text message: ERROR %v, want CONNECTION_ERROR", f.Code)
	}

	c = dialWS(t, e.http.URL)
	c.send(setupFrame(tok, 20000, 90000))
	_ = c.ws.Write(c.ctx, websocket.MessageBinary, make([]byte, 1<<10+metadataRoom+1)) // may fail: the server closes
	if code := c.closed(); code != websocket.StatusMessageTooBig {
		t.Errorf("oversized message: close %v, want 1009", code)
	}

	c = dialWS(t, e.http.URL) // sends nothing
	if code := c.closed(); code != websocket.StatusPolicyViolation {
		t.Errorf("no SETUP: close %v, want 1008", code)
	}
}

// onStream sets a frame's stream id.
func onStream(id uint32, frame []byte) []byte {
	binary.BigEndian.PutUint32(frame, id)
	return frame
}

// TestWebSocketKeepalive: a KEEPALIVE with RESPOND is answered with its
// data, before and during the stream; a client silent for its max
// lifetime gets an ERROR and the close; token_expires_in lines come at
// the keepalive interval, as over HTTP.
func TestWebSocketKeepalive(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	todoChanges(e, 1)
	tok := token(t, "u1", nil)
	c := dialWS(t, e.http.URL)
	c.send(setupFrame(tok, 20000, 90000))
	c.send(keepaliveFrame("before"))
	if f, err := c.frame(); err != nil || f.Type != rsocket.TypeKeepalive || string(f.Data) != "before" || f.Flags&rsocket.FlagRespond != 0 {
		t.Fatalf("frame %v %q, %v; want the KEEPALIVE answer", f.Type, f.Data, err)
	}
	c.send(requestStreamFrame(t, 10, nil))
	c.untilComplete()
	c.send(keepaliveFrame("during"))
	if f, err := c.frame(); err != nil || f.Type != rsocket.TypeKeepalive || string(f.Data) != "during" {
		t.Fatalf("frame %v %q, %v; want the KEEPALIVE answer", f.Type, f.Data, err)
	}

	silent := dialWS(t, e.http.URL)
	silent.send(setupFrame(tok, 100, 300)) // a 300 ms lifetime, and no KEEPALIVE
	silent.send(requestStreamFrame(t, 10, nil))
	for {
		f, err := silent.frame()
		if err != nil {
			t.Fatalf("connection ended without an ERROR: %v", err)
		}
		if f.Type == rsocket.TypeError {
			if f.StreamID != 0 || f.Code != rsocket.CodeConnectionError {
				t.Errorf("ERROR %v on %d, want CONNECTION_ERROR on 0", f.Code, f.StreamID)
			}
			break
		}
	}
	if code := silent.closed(); code != websocket.StatusPolicyViolation {
		t.Errorf("close %v, want 1008", code)
	}

	// The clients act on token_expires_in lines (they drop expired Sync
	// Stream subscriptions then), so they come as over HTTP.
	fast := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.KeepaliveInterval = 20 * time.Millisecond })
	todoChanges(fast, 1)
	c = dialWS(t, fast.http.URL)
	c.open(tok, 10, nil)
	c.untilComplete()
	for i := range 3 {
		if l, _ := c.next(); l.TokenExpiresIn == nil || *l.TokenExpiresIn < 3590 {
			t.Fatalf("line %d after the checkpoint: %s, want token_expires_in", i, l.Raw)
		}
		c.send(requestNFrame(1))
	}
}

// TestWebSocketTokenExpiry: the stream's token_expires_in lines end
// with 0 at expiry; a client that then cancels (the SDK does, to
// reconnect with a new token) gets nothing more, and one that does not
// gets COMPLETE after the server's completeDelay.
func TestWebSocketTokenExpiry(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	expiring := func() (*fakeEnv, string) {
		e := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
			c.Now = func() time.Time { return exp.Add(-time.Second) }
		})
		todoChanges(e, 1)
		return e, token(t, "u1", func(c jwt.MapClaims) { c["exp"] = exp.Unix(); c["iat"] = exp.Add(-time.Hour).Unix() })
	}

	e, tok := expiring()
	ended := make(chan struct{}, 1)
	e.srv.streamDone = func() { ended <- struct{}{} }
	c := dialWS(t, e.http.URL)
	c.open(tok, 100, nil)
	for first := true; ; first = false { // the first line says 1 s is left
		l, ok := c.next()
		if !ok {
			t.Fatal("COMPLETE before token_expires_in 0")
		}
		if l.TokenExpiresIn != nil && *l.TokenExpiresIn == 0 && !first {
			break
		}
	}
	c.send(cancelFrame())
	waitSignal(t, ended)
	c.send(keepaliveFrame("after expiry"))
	if f, err := c.frame(); err != nil || f.Type != rsocket.TypeKeepalive {
		t.Fatalf("after CANCEL at expiry: frame %v %q, %v; want the KEEPALIVE answer, no COMPLETE", f.Type, f.Data, err)
	}

	e, tok = expiring()
	e.srv.completeDelay = 0
	c = dialWS(t, e.http.URL)
	c.open(tok, 100, nil)
	var ls []line
	for {
		l, ok := c.next()
		if !ok {
			break
		}
		ls = append(ls, l)
	}
	got := kinds(ls)
	if n := len(ls); n < 4 || got[0] != "token_expires_in" || *ls[0].TokenExpiresIn > 1 || got[n-1] != "token_expires_in" || *ls[n-1].TokenExpiresIn != 0 {
		t.Fatalf("lines %v, want token_expires_in ≤ 1 first, 0 last, then COMPLETE", got)
	}
}

// TestWebSocketStreamError: an error that ends the stream is an ERROR
// APPLICATION_ERROR on it with the PSYNC code, not an error line.
func TestWebSocketStreamError(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.MaxBucketsPerConnection = 2 })
	todoChanges(e, 1)
	c := dialWS(t, e.http.URL)
	c.open(token(t, "u1", nil), 10, nil)
	for {
		f, err := c.frame()
		if err != nil {
			t.Fatalf("connection ended without an ERROR: %v", err)
		}
		if f.Type == rsocket.TypePayload {
			if l := decodeBSONLine(t, f.Data); l.TokenExpiresIn == nil {
				t.Fatalf("line %s before the error", l.Raw)
			}
			continue
		}
		if f.Type != rsocket.TypeError || f.StreamID != 1 || f.Code != rsocket.CodeApplicationError ||
			!strings.HasPrefix(string(f.Data), "["+codeTooManyBuckets+"] ") {
			t.Fatalf("frame %v on %d, code %v %q; want APPLICATION_ERROR on 1 [%s]", f.Type, f.StreamID, f.Code, f.Data, codeTooManyBuckets)
		}
		break
	}
	// The server leaves the close to the client (the SDK handles the
	// stream's last frames first), and closes itself after
	// streamEndGrace.
	if code := c.closed(); code != websocket.StatusNormalClosure {
		t.Errorf("close %v", code)
	}
}

// TestWebSocketMetrics: connections and bytes carry the transport, so an
// HTTP and a WebSocket stream open at once are counted apart.
func TestWebSocketMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	todoChanges(e, 2)
	tok := token(t, "u1", nil)
	e.open(tok, nil).untilComplete()
	c := dialWS(t, e.http.URL)
	c.open(tok, 10, nil)
	c.untilComplete()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{} // "metric transport" → value
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || (m.Name != "syncpipe_concurrent_connections" && m.Name != "syncpipe_sync_sent_bytes") {
				continue
			}
			for _, p := range sum.DataPoints {
				tr, _ := p.Attributes.Value("transport")
				got[m.Name+" "+tr.AsString()] += p.Value
				if ct, _ := p.Attributes.Value("content_type"); tr.AsString() == transportWebSocket && m.Name == "syncpipe_sync_sent_bytes" && ct.AsString() != bsonType {
					t.Errorf("WebSocket bytes as %q, want %s", ct.AsString(), bsonType)
				}
			}
		}
	}
	for _, k := range []string{"syncpipe_concurrent_connections http", "syncpipe_concurrent_connections websocket"} {
		if got[k] != 1 {
			t.Errorf("%s = %d, want 1 (metrics %v)", k, got[k], got)
		}
	}
	for _, k := range []string{"syncpipe_sync_sent_bytes http", "syncpipe_sync_sent_bytes websocket"} {
		if got[k] <= 0 {
			t.Errorf("%s = %d, want > 0 (metrics %v)", k, got[k], got)
		}
	}
}

// TestWebSocketShutdown: while the server shuts down gracefully, a new
// SETUP is refused with PSYNC_S2003 and an open WebSocket stream goes on
// until its client ends it, which ends the shutdown; Close ends a stream
// at once.
func TestWebSocketShutdown(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	todoChanges(e, 1)
	tok := token(t, "u1", nil)
	open := dialWS(t, e.http.URL)
	open.open(tok, 10, nil)
	open.untilComplete()

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	for refused := false; !refused; runtime.Gosched() { // Shutdown refuses new streams first
		e.srv.mu.Lock()
		refused = e.srv.closed
		e.srv.mu.Unlock()
	}
	late := dialWS(t, e.http.URL)
	late.open(tok, 10, nil)
	if f := late.refused(); f.Code != rsocket.CodeRejectedSetup || !strings.HasPrefix(string(f.Data), "["+codeUnavailable+"] ") {
		t.Errorf("SETUP during shutdown: ERROR %v %q, want REJECTED_SETUP [%s]", f.Code, f.Data, codeUnavailable)
	}
	open.send(keepaliveFrame("still open"))
	if f, err := open.frame(); err != nil || f.Type != rsocket.TypeKeepalive {
		t.Fatalf("open stream during shutdown: %v, %v", f.Type, err)
	}
	open.send(cancelFrame())
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v, want nil once the stream ended", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Shutdown did not return once the last stream ended")
	}

	// Close ends an open stream: a server closed under it.
	e2 := newFakeEnv(t, todoRules, todoTables, nil)
	todoChanges(e2, 1)
	c := dialWS(t, e2.http.URL)
	c.open(tok, 10, nil)
	c.untilComplete()
	e2.srv.Close()
	for {
		f, err := c.frame()
		if err != nil {
			break
		}
		if f.Type == rsocket.TypePayload && f.Flags&rsocket.FlagNext != 0 {
			t.Fatalf("a line after Close")
		}
	}
}

// TestWebSocketOutlivesHTTPTimeouts: the API's http.Server has read and
// write timeouts for requests (cli/api.go), whose deadlines net/http
// leaves on a connection it hands over; the WebSocket clears them, so a
// connection lives past them — here until its client's lifetime ends it
// with an ERROR, not a dropped read.
func TestWebSocketOutlivesHTTPTimeouts(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	todoChanges(e, 1)
	hs := httptest.NewUnstartedServer(e.srv.Handler())
	hs.Config.ReadTimeout, hs.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	hs.Start()
	t.Cleanup(hs.Close)
	c := dialWS(t, hs.URL)
	c.send(setupFrame(token(t, "u1", nil), 100, 1000)) // silent for its 1 s lifetime
	c.send(requestStreamFrame(t, 10, nil))
	for {
		f, err := c.frame()
		if err != nil {
			t.Fatalf("connection ended without the lifetime's ERROR: %v", err)
		}
		if f.Type == rsocket.TypeError {
			if f.Code != rsocket.CodeConnectionError || !strings.Contains(string(f.Data), "KEEPALIVE") {
				t.Fatalf("ERROR %v %q, want the lifetime's", f.Code, f.Data)
			}
			return
		}
	}
}

// TestWebSocketConnGuard: WebSocket upgrades that send no SETUP count
// among the ConnGuard's pending connections, so beyond its bound the
// oldest is closed, as a stalled request would be; a connection whose
// SETUP was accepted is a stream, bounded by the slots, and is not.
func TestWebSocketConnGuard(t *testing.T) {
	t.Parallel()
	const limit = 2
	e := newFakeEnv(t, todoRules, todoTables, nil)
	todoChanges(e, 1)
	addr, g := guardedServer(t, e, limit)
	url := "http://" + addr
	streaming := dialWS(t, url)
	streaming.open(token(t, "u1", nil), 10, nil)
	streaming.untilComplete()

	var idle []*wsClient // upgraded, in order: the first is the oldest
	for range limit + 1 {
		idle = append(idle, dialWS(t, url))
	}
	if _, err := idle[0].frame(); err == nil || websocket.CloseStatus(err) != -1 {
		t.Errorf("the oldest idle upgrade: %v, want it dropped by the guard", err)
	}
	g.mu.Lock()
	n := g.pending.Len()
	g.mu.Unlock()
	if n != limit {
		t.Errorf("%d connections counted, want %d: the idle upgrades, not the stream", n, limit)
	}
	streaming.send(keepaliveFrame("still here"))
	if f, err := streaming.frame(); err != nil || f.Type != rsocket.TypeKeepalive {
		t.Fatalf("the stream after the evictions: %v, %v", f.Type, err)
	}
}
