package syncapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// authCase is a request that must be refused.
type authCase struct {
	name   string
	header string // Authorization value
	code   string
}

// expectRefused checks that every case gets 401 with a JSON error of its
// code on the stream endpoint and on the write checkpoint endpoint.
func expectRefused(t *testing.T, e *env, cases []authCase) {
	t.Helper()
	for _, c := range cases {
		for _, target := range []string{"/sync/stream", "/write-checkpoint2.json?client_id=x"} {
			method := http.MethodPost
			if !strings.HasPrefix(target, "/sync") {
				method = http.MethodGet
			}
			rec := httpRecord(e.srv, method, target, c.header, `{"raw_data":true}`)
			var body struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			err := json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code != http.StatusUnauthorized || err != nil || body.Error.Code != c.code || body.Error.Message == "" ||
				rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("%s %s: HTTP %d %s, want 401 with code %s", c.name, target, rec.Code, rec.Body, c.code)
			}
		}
	}
}

// expectAccepted opens a stream with the header and reads its first line.
func expectAccepted(t *testing.T, e *env, name, header string) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+"/sync/stream", strings.NewReader(`{}`))
	req.Header.Set("Authorization", header)
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%s: HTTP %d, want 200", name, resp.StatusCode)
		return
	}
	s := readStream(t, resp, resp.Body, cancel)
	defer s.close()
	if l, ok := s.next(); !ok || l.TokenExpiresIn == nil {
		t.Errorf("%s: first line %s", name, l.Raw)
	}
}

func TestAuthFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	now := time.Now()
	hs := func(edit func(jwt.MapClaims)) string { return "Token " + token(t, "u1", edit) }
	otherSecret, _ := jwt.NewWithClaims(jwt.SigningMethodHS256,
		jwt.MapClaims{"sub": "u1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "aud": testAudience}).SignedString([]byte("wrong"))
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone,
		jwt.MapClaims{"sub": "u1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "aud": testAudience}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rs, _ := jwt.NewWithClaims(jwt.SigningMethodRS256,
		jwt.MapClaims{"sub": "u1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "aud": testAudience}).SignedString(rsaKey)
	expectRefused(t, e, []authCase{
		{"missing header", "", codeAuthMissing},
		{"basic auth", "Basic dTE6cHc=", codeAuthMissing},
		{"empty token", "Token ", codeAuthMissing},
		{"malformed", "Token not.a.jwt", codeAuthGeneric},
		{"bad signature", "Token " + otherSecret, codeAuthGeneric},
		{"alg none", "Token " + none, codeAuthGeneric},
		{"RS256 without RSA keys", "Bearer " + rs, codeAuthGeneric},
		{"expired", hs(func(c jwt.MapClaims) {
			c["iat"], c["exp"] = now.Add(-2*time.Hour).Unix(), now.Add(-61*time.Second).Unix()
		}), codeAuthExpired},
		{"wrong audience", hs(func(c jwt.MapClaims) { c["aud"] = []string{"other", "another"} }), codeAuthAudience},
		{"missing aud", hs(func(c jwt.MapClaims) { delete(c, "aud") }), codeAuthAudience},
		{"missing sub", hs(func(c jwt.MapClaims) { delete(c, "sub") }), codeAuthGeneric},
		{"empty sub", hs(func(c jwt.MapClaims) { c["sub"] = "" }), codeAuthGeneric},
		{"missing iat", hs(func(c jwt.MapClaims) { delete(c, "iat") }), codeAuthGeneric},
		{"missing exp", hs(func(c jwt.MapClaims) { delete(c, "exp") }), codeAuthGeneric},
		{"iat in the future", hs(func(c jwt.MapClaims) { c["iat"] = now.Add(5 * time.Minute).Unix() }), codeAuthGeneric},
		{"lifetime too long", hs(func(c jwt.MapClaims) { c["exp"] = now.Add(25 * time.Hour).Unix() }), codeAuthLifetime},
		{"parameters not an object", hs(func(c jwt.MapClaims) { c["parameters"] = []string{"a"} }), codeAuthGeneric},
	})
	// Within the 60 s clock skew, and with aud as one of a list.
	expectAccepted(t, e, "expired 30 s ago", hs(func(c jwt.MapClaims) {
		c["iat"], c["exp"] = now.Add(-time.Hour).Unix(), now.Add(-30*time.Second).Unix()
	}))
	expectAccepted(t, e, "aud list", "Bearer "+token(t, "u1", func(c jwt.MapClaims) { c["aud"] = []string{"x", testAudience} }))
	expectAccepted(t, e, "parameters object", "bearer "+token(t, "u1", func(c jwt.MapClaims) { c["parameters"] = map[string]any{"a": 1} }))
}

// jwksServer serves a key set that tests may change, counting fetches.
type jwksServer struct {
	mu      sync.Mutex
	keys    []map[string]any
	fetches atomic.Int64
	*httptest.Server
}

func newJWKSServer(t *testing.T, keys ...map[string]any) *jwksServer {
	j := &jwksServer{keys: keys}
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": j.keys})
	}))
	t.Cleanup(j.Close)
	return j
}

func (j *jwksServer) add(k map[string]any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.keys = append(j.keys, k)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PrivateKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func ecJWK(kid string, k *ecdsa.PrivateKey) map[string]any {
	pub, _ := k.PublicKey.Bytes() // 0x04 || x || y
	return map[string]any{"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(pub[1:33]), "y": b64(pub[33:])}
}

// signed mints a token for u1 with method, key and kid.
func signed(t *testing.T, m jwt.SigningMethod, key any, kid string) string {
	t.Helper()
	now := time.Now()
	tok := jwt.NewWithClaims(m, jwt.MapClaims{"sub": "u1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "aud": testAudience})
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return "Token " + s
}

func TestJWKS(t *testing.T) {
	t.Parallel()
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks := newJWKSServer(t, rsaJWK("k1", k1))
	e := newEnv(t, todoRules, todoTables, func(c *Config) {
		c.Auth.JWKSURI = jwks.URL
		c.Auth.JWKS.Keys = []map[string]any{ecJWK("e1", ec)}
	})
	expectAccepted(t, e, "RS256 with kid k1", signed(t, jwt.SigningMethodRS256, k1, "k1"))
	expectAccepted(t, e, "ES256 inline key", signed(t, jwt.SigningMethodES256, ec, "e1"))
	expectAccepted(t, e, "HS256 secret", "Token "+token(t, "u1", nil))
	if n := jwks.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches, want 1 (cached)", n)
	}
	// Key rotation: an unknown kid refetches the set.
	jwks.add(rsaJWK("k2", k2))
	expectAccepted(t, e, "RS256 with rotated kid k2", signed(t, jwt.SigningMethodRS256, k2, "k2"))
	if n := jwks.fetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches, want 2 (refetched for k2)", n)
	}
	expectRefused(t, e, []authCase{
		{"unknown kid", signed(t, jwt.SigningMethodRS256, stranger, "nope"), codeAuthGeneric},
		{"k1 kid, other key", signed(t, jwt.SigningMethodRS256, stranger, "k1"), codeAuthGeneric},
		{"k1 kid, wrong alg", signed(t, jwt.SigningMethodES256, ec, "k1"), codeAuthGeneric},
		{"no kid, RS256", signed(t, jwt.SigningMethodRS256, k1, ""), codeAuthGeneric},
	})
	// Unknown kids do not refetch again right away (no fetch storms).
	if n := jwks.fetches.Load(); n != 2 {
		t.Fatalf("%d JWKS fetches after unknown kids, want still 2", n)
	}
}

func TestJWKSUnreachable(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	e := newEnv(t, todoRules, todoTables, func(c *Config) { c.Auth.JWKSURI = down.URL; c.Auth.HS256Secrets = nil })
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	expectRefused(t, e, []authCase{{"JWKS down", signed(t, jwt.SigningMethodRS256, k, "k1"), codeJWKSFailed}})
}

func TestParseJWKErrors(t *testing.T) {
	t.Parallel()
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	good := rsaJWK("k", k)
	with := func(edit func(m map[string]any)) map[string]any {
		m := map[string]any{}
		for key, v := range good {
			m[key] = v
		}
		edit(m)
		return m
	}
	for name, m := range map[string]map[string]any{
		"no kty":        with(func(m map[string]any) { delete(m, "kty") }),
		"unknown kty":   with(func(m map[string]any) { m["kty"] = "OKP" }),
		"encryption":    with(func(m map[string]any) { m["use"] = "enc" }),
		"bad n":         with(func(m map[string]any) { m["n"] = "***" }),
		"alg mismatch":  with(func(m map[string]any) { m["alg"] = "ES256" }),
		"kid not text":  with(func(m map[string]any) { m["kid"] = 7.0 }),
		"EC bad curve":  {"kty": "EC", "crv": "P-192", "x": "AA", "y": "AA"},
		"EC off curve":  {"kty": "EC", "crv": "P-256", "x": b64(make([]byte, 32)), "y": b64([]byte{1})},
		"oct no secret": {"kty": "oct"},
	} {
		if _, err := parseJWK(m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parseJWK(good); err != nil {
		t.Fatal(err)
	}
	oct, err := parseJWK(map[string]any{"kty": "oct", "kid": "h", "k": b64([]byte("secret"))})
	if err != nil || !oct.allows("HS256") || string(oct.key.([]byte)) != "secret" {
		t.Fatalf("oct key: %+v %v", oct, err)
	}
}

func TestNewRejectsAuthConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	for name, auth := range map[string]func(*Config){
		"no audience": func(c *Config) { c.Auth.Audience = nil },
		"no keys":     func(c *Config) { c.Auth.HS256Secrets = nil },
		"bad inline":  func(c *Config) { c.Auth.JWKS.Keys = []map[string]any{{"kty": "RSA"}} },
	} {
		cfg := Config{Groups: e.store.Catalog(), Store: e.store.Reader(), Sources: e.store.Reader(), Auth: e.srv.cfg.Auth}
		auth(&cfg)
		if s, err := New(e.ctx, cfg); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}
