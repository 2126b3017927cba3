package syncapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// slowRequest opens a connection and sends a POST /sync/stream whose
// headers announce a body of bodyLen bytes, and the first byte of it
// only: a client that sends its body a byte at a time.
func slowRequest(t *testing.T, addr, auth string, bodyLen int) net.Conn {
	t.Helper()
	c := dial(t, addr)
	postStream(t, c, auth, "", bodyLen, "{")
	return c
}

// dial connects to addr; the connection closes when the test ends.
func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// postStream writes a POST /sync/stream to c: the Authorization value,
// more header lines (each ending in \r\n), a Content-Length of n and the
// first bytes of the body.
func postStream(t testing.TB, c net.Conn, auth, header string, n int, body string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "POST /sync/stream HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\n%sContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n%s", auth, header, n, body); err != nil {
		t.Fatal(err)
	}
}

// postRawData writes a whole {"raw_data":true} sync request for tok to c,
// accepting gzip or identity only.
func postRawData(t testing.TB, c net.Conn, tok string, gz bool) {
	t.Helper()
	enc := map[bool]string{false: "identity", true: "gzip"}[gz]
	body := `{"raw_data":true}`
	postStream(t, c, "Token "+tok, "Accept-Encoding: "+enc+"\r\n", len(body), body)
}

// response reads one HTTP response from c (within limit) and then waits
// for the server to close the connection, reporting how long both took.
func response(t *testing.T, c net.Conn, limit time.Duration) (resp *http.Response, answered, closed time.Duration) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response within %s: %v", limit, err)
	}
	_, _ = io.ReadAll(resp.Body)
	answered = time.Since(start)
	_, err = br.ReadByte()
	if ne := net.Error(nil); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection stays open %s after the response (%v)", limit, err)
	}
	return resp, answered, time.Since(start)
}

// TestSlowBodyInvalidToken: a request with an invalid token gets its 401
// at once, without the server waiting for the body, and the connection
// is closed (before, net/http read the rest of the body after the
// handler, at the client's pace: a byte a second held it for good).
func TestSlowBodyInvalidToken(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil) // the default 10 s body deadline
	c := slowRequest(t, e.http.Listener.Addr().String(), "Token not.a.jwt", 100)
	resp, answered, closed := response(t, c, 5*time.Second)
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close || answered > time.Second {
		t.Fatalf("HTTP %d after %s, Connection: close %v; want 401 at once, and close", resp.StatusCode, answered, resp.Close)
	}
	t.Logf("401 after %s, connection closed after %s", answered, closed)
}

// TestOversizedHeaders: headers over MaxHeaderBytes get a 431 in the
// API's JSON error shape, naming the limit, and the connection closes.
func TestOversizedHeaders(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	c := dial(t, e.http.Listener.Addr().String())
	postStream(t, c, "Token "+strings.Repeat("x", 100<<10), "", 2, "{}")
	resp, _, _ := response(t, c, 5*time.Second)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !resp.Close ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("HTTP %d (%s), Connection: close %v; want a JSON 431, and close", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close)
	}
}

// TestSlowBodyTimesOut: an authenticated client whose body does not
// arrive within the body deadline gets 408 and its connection closed.
func TestSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	const deadline = 300 * time.Millisecond
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.BodyReadTimeout = deadline })
	c := slowRequest(t, e.http.Listener.Addr().String(), "Token "+token(t, "u1", nil), 100)
	for range 3 { // a byte every 50 ms: still too slow for the whole body
		time.Sleep(50 * time.Millisecond)
		_, _ = c.Write([]byte(" "))
	}
	resp, answered, _ := response(t, c, 10*time.Second)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || answered > 5*time.Second {
		t.Fatalf("HTTP %d after %s: %s, want 408 after about %s", resp.StatusCode, answered, b, deadline)
	}
}

// TestStreamOutlivesBodyDeadline: the body deadline ends with the body —
// a stream goes on past it (net/http's read ahead on the connection, which
// notices a client going away, would otherwise time out and end it; both
// net/http and the handler clear the deadline once the body is read).
func TestStreamOutlivesBodyDeadline(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
		c.BodyReadTimeout = 200 * time.Millisecond
		c.KeepaliveInterval = 100 * time.Millisecond
	})
	e.commit(e.upsert("lists", "a", "A", "u1"))
	s := e.open(token(t, "u1", nil), nil)
	s.untilComplete()
	until := time.Now().Add(time.Second)
	for time.Now().Before(until) {
		if l, ok := s.next(); !ok {
			t.Fatalf("the stream ended after the body deadline: %s", l.Raw)
		}
	}
}

// TestTooManyStreamsRetryAfter: a stream refused for
// max_concurrent_connections carries Retry-After.
func TestTooManyStreamsRetryAfter(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.MaxConcurrentConnections = 1 })
	e.commit(e.upsert("lists", "a", "A", "u1"))
	e.open(token(t, "u1", nil), nil).untilComplete()
	resp := e.request(e.ctx, token(t, "u1", nil), map[string]any{}, nil, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != retryAfter ||
		!strings.Contains(string(b), "api.max_concurrent_connections") {
		t.Fatalf("HTTP %d Retry-After %q: %s, want 429 with Retry-After %s", resp.StatusCode, resp.Header.Get("Retry-After"), b, retryAfter)
	}
}

// guardedServer serves e's handler behind a ConnGuard of limit, and
// returns its address.
func guardedServer(t *testing.T, e *fakeEnv, limit int) (string, *ConnGuard) {
	t.Helper()
	g := NewConnGuard(limit, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ConnState: g.ConnState, ConnContext: g.ConnContext}
	go func() { _ = hs.Serve(g.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String(), g
}

// closedSoon reports whether the server closes c within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnGuard: beyond the guard's limit of connections that are not
// streams, each new connection closes the oldest stalled one, so a
// health check always gets in; open streams are not counted and never
// closed.
func TestConnGuard(t *testing.T) {
	t.Parallel()
	const limit = 4
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.KeepaliveInterval = 50 * time.Millisecond })
	addr, g := guardedServer(t, e, limit)
	e.commit(e.upsert("lists", "a", "A", "u1"))
	tok := "Token " + token(t, "u1", nil)

	streamConn := slowRequest(t, addr, tok, 2)
	if _, err := streamConn.Write([]byte("}")); err != nil {
		t.Fatal(err)
	}
	lines := make(chan time.Time, 1024) // when each line of the stream arrived
	go func() {
		defer close(lines)
		br := bufio.NewReader(streamConn)
		for {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
			lines <- time.Now()
		}
	}()
	<-lines // the status line: streaming
	var stalled []net.Conn
	for range limit + 3 {
		stalled = append(stalled, slowRequest(t, addr, tok, 100))
		time.Sleep(20 * time.Millisecond) // in order: the first are the oldest
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz with %d stalled connections: %v %v", len(stalled), resp, err)
	}
	resp.Body.Close()
	t.Logf("/healthz answered in %s", time.Since(start))
	for i, c := range stalled {
		if closed := closedSoon(c, 300*time.Millisecond); closed != (i < 4) {
			t.Errorf("stalled connection %d: closed %v, want the 4 oldest closed", i, closed)
		}
	}
	g.mu.Lock()
	n := g.pending.Len() // connections counted, not streams
	g.mu.Unlock()
	if n > limit {
		t.Errorf("%d connections counted, limit %d", n, limit)
	}
	evicted := time.Now()
	for at := range lines {
		if at.After(evicted) {
			return // the stream still gets its keepalives
		}
	}
	t.Fatal("the stream was closed")
}
