package syncapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncpipe/syncpipe/model"
)

func TestRequestBodyValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.MaxRequestBytes = 2048 })
	auth := "Token " + token(t, "u1", nil)
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`not json`, 400, "not valid JSON"},
		{`[1, 2]`, 400, "must be a JSON object, got array"},
		{`null`, 400, "must be a JSON object"},
		{`{} {}`, 400, "not valid JSON"},
		{`{"buckets": "all"}`, 400, "buckets must be an array"},
		{`{"buckets": [7]}`, 400, "buckets[0]: must be an object"},
		{`{"buckets": [{"after": "1"}]}`, 400, "buckets[0]: name must be a non-empty string"},
		{`{"buckets": [{"name": "a", "after": "1"}, {"name": "b", "after": "x1"}]}`, 400, `buckets[1]: after of bucket "b" must be a decimal string op id, got "x1"`},
		{`{"buckets": [{"name": "a", "after": "-1"}]}`, 400, "decimal string op id"},
		{`{"buckets": [{"name": "a", "after": true}]}`, 400, "got a boolean"},
		{`{"raw_data": "yes"}`, 400, "raw_data must be a boolean, got a string"},
		{`{"parameters": [1]}`, 400, "parameters must be a JSON object, got an array"},
		{`{"client_id": 5}`, 400, "client_id must be a string"},
		{`{"include_checksum": 1}`, 400, "include_checksum must be a boolean"},
		{`{"padding": "` + strings.Repeat("x", 4096) + `"}`, 413, "max_request_bytes"},
	} {
		rec := httpRecord(e.srv, http.MethodPost, "/sync/stream", auth, c.body)
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != c.status || !strings.Contains(body.Error.Message, c.msg) {
			t.Errorf("%.40s: HTTP %d %q, want %d containing %q", c.body, rec.Code, body.Error.Message, c.status, c.msg)
		}
	}
	// Unknown fields are ignored; numbers are accepted for after.
	e.commit(e.upsert("lists", "a", "A", "u1"))
	s := e.open(token(t, "u1", nil), map[string]any{"buckets": []any{map[string]any{"name": "x", "after": 5}},
		"app_metadata": map[string]any{"v": 1}, "streams": map[string]any{}, "include_checksum": true, "client_id": "c"})
	if ls := s.untilComplete(); ls[0].Checkpoint == nil {
		t.Fatalf("lines %v", kinds(ls))
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	rec := httpRecord(e.srv, http.MethodGet, "/healthz", "", "")
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"ok":true,"status":"ok"}` {
		t.Fatalf("healthz: %d %s", rec.Code, rec.Body)
	}
	// GET /sync/stream is the WebSocket transport: without an upgrade,
	// 426 says so; other methods are not served.
	if rec := httpRecord(e.srv, http.MethodGet, "/sync/stream", "", ""); rec.Code != http.StatusUpgradeRequired ||
		rec.Header().Get("Upgrade") != "websocket" || !strings.Contains(rec.Body.String(), codeBadRequest) {
		t.Fatalf("GET /sync/stream: %d %s", rec.Code, rec.Body)
	}
	if rec := httpRecord(e.srv, http.MethodPut, "/sync/stream", "", ""); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /sync/stream: %d", rec.Code)
	}
}

// TestDisconnectFreesSlot runs alone (not parallel) so that goleak sees
// only its own goroutines.
func TestDisconnectFreesSlot(t *testing.T) {
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.MaxConcurrentConnections = 1 })
	e.commit(e.upsert("lists", "a", "A", "u1"))
	ended := make(chan struct{}, 4)
	e.srv.streamDone = func() { ended <- struct{}{} }
	client := &http.Client{Transport: &http.Transport{}}
	tok := token(t, "u1", nil)
	open := func() (*stream, int) {
		ctx, cancel := context.WithCancel(e.ctx)
		resp := e.request(ctx, tok, map[string]any{}, nil, client)
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			cancel()
			return nil, resp.StatusCode
		}
		return readStream(t, resp, resp.Body, cancel), resp.StatusCode
	}
	ignore := goleak.IgnoreCurrent()

	s1, code := open()
	if code != 200 {
		t.Fatalf("first stream: HTTP %d", code)
	}
	s1.untilComplete()
	if _, code := open(); code != http.StatusTooManyRequests {
		t.Fatalf("second stream: HTTP %d, want 429", code)
	}
	s1.close() // the client goes away
	waitSignal(t, ended)
	s3, code := open()
	if code != 200 {
		t.Fatalf("stream after the disconnect: HTTP %d, want 200", code)
	}
	s3.untilComplete()
	s3.close()
	waitSignal(t, ended)
	client.CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}

// waitSignal receives from ch; the limit only turns a hang into a failure.
func waitSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for the stream to end")
	}
}

// TestCloseEndsStreams: Close ends open streams, also one whose client
// stopped reading, and later requests get 503. (TestAbortUnblocksWrite
// covers a write blocked on such a client deterministically.)
func TestCloseEndsStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	var cs []model.Change
	for i := range 8000 {
		cs = append(cs, e.upsert("lists", fmt.Sprintf("l%05d", i), strings.Repeat("n", 1000), "nobody"))
	}
	res, err := e.w.WriteSnapshot(e.ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	e.publish(res.MaxOpID)
	tok := token(t, "u1", nil)
	reading := e.open(tok, nil)
	if l, ok := reading.next(); !ok || l.TokenExpiresIn == nil {
		t.Fatalf("first stream: %s", l.Raw)
	}

	// A client that sends its request and never reads the 8 MB answer.
	conn, err := net.Dial("tcp", e.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	started := make(chan struct{}, 1)
	e.srv.afterDataLine = func() {
		select {
		case started <- struct{}{}:
		default:
		}
	}
	body := `{"raw_data":true}`
	fmt.Fprintf(conn, "POST /sync/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Token %s\r\nContent-Length: %d\r\n\r\n%s", tok, len(body), body)
	waitSignal(t, started)

	closed := make(chan struct{})
	go func() { e.srv.Close(); close(closed) }()
	waitSignal(t, closed) // well before writeTimeout
	reading.end()         // ends
	if rec := httpRecord(e.srv, http.MethodPost, "/sync/stream", "Token "+tok, "{}"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("after Close: HTTP %d, want 503", rec.Code)
	}
}

// stallingWriter is a ResponseWriter whose writes block until its write
// deadline is set to the past, like a connection to a client that stopped
// reading.
type stallingWriter struct {
	header  http.Header
	blocked chan struct{} // closed when a write blocks
	expired chan struct{} // closed when the deadline passes
	once    sync.Once
}

func (w *stallingWriter) Header() http.Header { return w.header }
func (w *stallingWriter) WriteHeader(int)     {}
func (w *stallingWriter) Flush()              {}
func (w *stallingWriter) Write(b []byte) (int, error) {
	close(w.blocked)
	<-w.expired
	return 0, errors.New("i/o timeout")
}
func (w *stallingWriter) SetWriteDeadline(d time.Time) error {
	if !d.After(time.Now()) {
		w.once.Do(func() { close(w.expired) })
	}
	return nil
}

func TestAbortUnblocksWrite(t *testing.T) {
	t.Parallel()
	w := &stallingWriter{header: http.Header{}, blocked: make(chan struct{}), expired: make(chan struct{})}
	req := httptest.NewRequest(http.MethodPost, "/sync/stream", nil)
	lw := startStream(w, req, writeTimeout)
	errc := make(chan error, 1)
	go func() { errc <- lw.tokenExpiresIn(1) }()
	<-w.blocked
	lw.abort()
	if err := <-errc; err == nil {
		t.Fatal("blocked write succeeded")
	}
	if err := lw.tokenExpiresIn(1); !errors.Is(err, errAborted) {
		t.Fatalf("write after abort: %v", err)
	}
	lw.finish()
	lw.abort() // after the handler returned: must not touch w
}
