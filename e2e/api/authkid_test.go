package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// TestAPIUnknownKidRefused: a token whose header names a kid no key has
// is refused with 401 PSYNC_S2101 by a running syncpipe, although the
// configured kid-less HS256 secret signed it (before, it was verified
// with that secret and accepted); the same token without the kid is
// accepted.
func TestAPIUnknownKidRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, _ := startTodosAPI(t, ctx)
	sign := func(kid string) string {
		n := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256,
			jwt.MapClaims{"sub": "user-1", "iat": n.Unix(), "exp": n.Add(time.Hour).Unix(), "aud": "syncpipe"})
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString([]byte(harness.Secret))
		if err != nil {
			t.Fatal(err)
		}
		return "Token " + s
	}
	status, said := postStream(t, ctx, e.API, sign("no-such-key"))
	if status != http.StatusUnauthorized || !strings.HasPrefix(said, `PSYNC_S2101 no matching key: no key has the token's kid "no-such-key"`) {
		t.Errorf("token with an unknown kid: HTTP %d %q, want 401 PSYNC_S2101 naming the kid", status, said)
	}
	if status, said := postStream(t, ctx, e.API, sign("")); status != http.StatusOK {
		t.Errorf("the same token without kid: HTTP %d %q, want 200", status, said)
	}
}

// postStream opens a sync stream with the Authorization value and returns
// its status and, for an error, the error's code and message.
func postStream(t *testing.T, ctx context.Context, api, auth string) (int, string) {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "http://"+api+"/sync/stream", strings.NewReader(`{"raw_data": true}`))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "" // a stream: it does not end by itself
	}
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code + " " + e.Error.Message
}

// TestRunRefusesShortHS256Secret: `syncpipe run` with a 5-byte HS256
// secret exits 2 at start-up, naming the file, line and key.
func TestRunRefusesShortHS256Secret(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: "bucket_definitions: {}\n"})
	b, err := os.ReadFile(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.Config, bytes.Replace(b, []byte(harness.Secret), []byte("short"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e.Start()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	code := p.Wait(wctx)
	want := regexp.MustCompile(regexp.QuoteMeta(e.Config) + `:\d+:\d+: api\.auth\.hs256_secrets\[0\]: must be at least 32 bytes \(got 5\)`)
	if code != cli.ExitUsage || !want.MatchString(e.TailLogs(4<<10)) {
		t.Fatalf("exit %d, want %d and an error matching %s; logs:\n%s", code, cli.ExitUsage, want, e.TailLogs(4<<10))
	}
}
