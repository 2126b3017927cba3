package syncapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// preflight sends a browser's CORS preflight for a sync request from
// origin, with the headers the PowerSync web SDK sets.
func preflight(t *testing.T, e *env, origin string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodOptions, e.http.URL+"/sync/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-user-agent")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// hasAll reports whether a comma-separated header value lists every name
// (case-insensitively).
func hasAll(value string, names ...string) bool {
	got := map[string]bool{}
	for f := range strings.SplitSeq(value, ",") {
		got[strings.ToLower(strings.TrimSpace(f))] = true
	}
	for _, n := range names {
		if !got[strings.ToLower(n)] {
			return false
		}
	}
	return true
}

// TestCORSAnyOrigin: with "*" (the syncpipe default, as PowerSync does),
// a preflight gets 204 with methods, headers and max age, and real
// responses — a stream and an auth error the SDK must be able to read —
// carry Access-Control-Allow-Origin.
func TestCORSAnyOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.CORSOrigins = []string{"*"} })
	e.commit(e.upsert("lists", "a", "A", "u1"))

	resp := preflight(t, e, "https://app.example.com")
	h := resp.Header
	if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("preflight: %d, Allow-Origin %q", resp.StatusCode, h.Get("Access-Control-Allow-Origin"))
	}
	if !hasAll(h.Get("Access-Control-Allow-Methods"), "POST", "GET") {
		t.Errorf("Allow-Methods %q", h.Get("Access-Control-Allow-Methods"))
	}
	if !hasAll(h.Get("Access-Control-Allow-Headers"), "Authorization", "Content-Type", "X-User-Agent", "X-Request-Id") {
		t.Errorf("Allow-Headers %q", h.Get("Access-Control-Allow-Headers"))
	}
	if h.Get("Access-Control-Max-Age") == "" || h.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("Max-Age %q, Allow-Credentials %q", h.Get("Access-Control-Max-Age"), h.Get("Access-Control-Allow-Credentials"))
	}

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	origin := http.Header{"Origin": {"https://app.example.com"}}
	stream := e.request(ctx, token(t, "u1", nil), map[string]any{"raw_data": true}, origin, nil)
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK || stream.Header.Get("Access-Control-Allow-Origin") != "*" ||
		!hasAll(stream.Header.Get("Access-Control-Expose-Headers"), "Content-Type") {
		t.Errorf("stream: %d, headers %v", stream.StatusCode, stream.Header)
	}
	denied := e.request(ctx, "", map[string]any{}, origin, nil)
	defer denied.Body.Close()
	if denied.StatusCode != http.StatusUnauthorized || denied.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("401 without Allow-Origin: %d, headers %v", denied.StatusCode, denied.Header)
	}
}

// TestCORSListedOrigins: only listed origins are echoed back (with Vary:
// Origin); another origin's preflight is refused without CORS headers.
func TestCORSListedOrigins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.CORSOrigins = []string{"https://App.example.com/"} })

	resp := preflight(t, e, "https://app.example.com")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!hasAll(resp.Header.Get("Vary"), "Origin") {
		t.Fatalf("listed origin: %d, headers %v", resp.StatusCode, resp.Header)
	}
	resp = preflight(t, e, "https://evil.example.com")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("other origin: %d, headers %v", resp.StatusCode, resp.Header)
	}
	rec := httpRecord(e.srv, http.MethodGet, "/healthz", "", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("request without Origin: %d, headers %v", rec.Code, rec.Header())
	}
}

// TestCORSOff: with no origins configured there are no CORS headers and
// OPTIONS is an ordinary (not allowed) method.
func TestCORSOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	resp := preflight(t, e, "https://app.example.com")
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight with CORS off: %d, headers %v", resp.StatusCode, resp.Header)
	}
}
