package syncapi

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestStreamTakesOverTheConnection: an HTTP/1.1 sync stream is answered
// on the connection taken over from net/http — chunked, Connection:
// close, the negotiated and CORS headers — and a stream that ends (its
// token expired) ends its body with the last chunk, so the client reads
// a complete response and then the connection closes. An HTTP/1.0
// request is answered through net/http, its body ending at the close.
func TestStreamTakesOverTheConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.CORSOrigins = []string{"*"} })
	e.commit(e.upsert("lists", "a", "A", "u1"))
	addr := e.http.Listener.Addr().String()

	// The token expires in two to three seconds (exp is whole seconds: one
	// second from now could be a few milliseconds away, and the stream
	// would end before its first sync on a loaded machine): the server
	// ends the stream.
	tok := token(t, "u1", func(c jwt.MapClaims) { c["exp"] = time.Now().Unix() + 3 })
	c := dial(t, addr)
	postStream(t, c, "Token "+tok, "Origin: https://app.example\r\n", len(`{"raw_data":true}`), `{"raw_data":true}`)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !resp.Close || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("HTTP %d, close %v, transfer encoding %v: want 200, chunked, Connection: close", resp.StatusCode, resp.Close, resp.TransferEncoding)
	}
	for k, want := range map[string]string{"Content-Type": ndjsonType, "Cache-Control": "no-store", "Access-Control-Allow-Origin": "*"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	body, err := io.ReadAll(resp.Body) // ends with the last chunk: no unexpected EOF
	if err != nil {
		t.Fatalf("body: %v (read %q)", err, body)
	}
	if !strings.Contains(string(body), `"checkpoint_complete"`) || !strings.Contains(string(body), `"token_expires_in":0`) {
		t.Fatalf("body %q: want the first sync and the expiry", body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the body: %v, want the connection closed", err)
	}

	// HTTP/1.0 has no chunked coding: net/http answers, the body ends at
	// the close.
	c10 := dial(t, addr)
	body10 := `{"raw_data":true}`
	if _, err := fmt.Fprintf(c10, "POST /sync/stream HTTP/1.0\r\nAuthorization: Token %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		token(t, "u1", nil), len(body10), body10); err != nil {
		t.Fatal(err)
	}
	_ = c10.SetReadDeadline(time.Now().Add(30 * time.Second))
	br10 := bufio.NewReader(c10)
	resp10, err := http.ReadResponse(br10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp10.StatusCode != http.StatusOK || len(resp10.TransferEncoding) != 0 || len(resp10.Header.Values("Vary")) != 1 {
		t.Fatalf("HTTP/1.0: %d, transfer encoding %v, Vary %q: want 200, none, one Vary", resp10.StatusCode, resp10.TransferEncoding, resp10.Header.Values("Vary"))
	}
	readToComplete(t, bufio.NewReader(resp10.Body))
}
