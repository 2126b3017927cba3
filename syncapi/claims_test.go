package syncapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncpipe/syncpipe/config"
)

// mint signs claims with header fields added, HS256 with secret.
func mint(t *testing.T, secret string, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return "Token " + s
}

// validClaims are claims the test env accepts: an hour from now.
func validClaims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": "u1", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "aud": testAudience}
}

// claimsWith returns validClaims with edits.
func claimsWith(edit func(jwt.MapClaims)) jwt.MapClaims {
	c := validClaims()
	edit(c)
	return c
}

// refusal is a request the server must refuse with 401, a code and a
// message containing msg.
type refusal struct {
	name, header, code, msg string
}

// expectRefusals checks each refusal on POST /sync/stream.
func expectRefusals(t *testing.T, srv *Server, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		// Bounded: a wrongly accepted token opens a stream that never ends.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec := httptest.NewRecorder()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/sync/stream", strings.NewReader(`{}`))
		req.Header.Set("Authorization", c.header)
		srv.Handler().ServeHTTP(rec, req)
		cancel()
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != http.StatusUnauthorized || body.Error.Code != c.code || !strings.Contains(body.Error.Message, c.msg) {
			t.Errorf("%s: HTTP %d %s %q, want 401 %s containing %q", c.name, rec.Code, body.Error.Code, body.Error.Message, c.code, c.msg)
		}
	}
}

// TestCritHeaderRefused: RFC 7515 §4.1.11 — a token whose crit header
// lists extensions is refused (the server implements none), as is a
// malformed crit; before, crit was ignored and such tokens accepted.
func TestCritHeaderRefused(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	expectRefusals(t, e.srv, []refusal{
		{"crit extension", mint(t, testSecret, map[string]any{"crit": []string{"urn:example:bind"}, "urn:example:bind": true}, validClaims()),
			codeAuthGeneric, `JWS extensions ["urn:example:bind"] (crit header)`},
		{"crit naming a registered header", mint(t, testSecret, map[string]any{"crit": []string{"exp"}}, validClaims()),
			codeAuthGeneric, "does not implement"},
		{"empty crit", mint(t, testSecret, map[string]any{"crit": []string{}}, validClaims()), codeAuthGeneric, "non-empty array"},
		{"crit not an array", mint(t, testSecret, map[string]any{"crit": "b64"}, validClaims()), codeAuthGeneric, "non-empty array"},
		{"crit of numbers", mint(t, testSecret, map[string]any{"crit": []int{1}}, validClaims()), codeAuthGeneric, "header parameter names"},
	})
	expectAccepted(t, e.env, "no crit", mint(t, testSecret, nil, validClaims()))
}

// TestHugeNumericDates: exp, iat and nbf far outside any real date
// (1e300, 1e400, negative) or of the wrong type get the 401 that names
// the actual problem — 1e300 used to overflow into a date in the past
// and be reported as "token expired". Fractional dates are valid
// NumericDates (RFC 7519 §2).
func TestHugeNumericDates(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	num := func(s string) json.Number { return json.Number(s) }
	tok := func(edit func(jwt.MapClaims)) string { return mint(t, testSecret, nil, claimsWith(edit)) }
	expectRefusals(t, e.srv, []refusal{
		{"exp 1e300", tok(func(c jwt.MapClaims) { c["exp"] = 1e300 }), codeAuthLifetime, "token lifetime exp - iat = 1e+300s exceeds the maximum of 24h0m0s"},
		{"exp 1e400", tok(func(c jwt.MapClaims) { c["exp"] = num("1e400") }), codeAuthLifetime, "exceeds the maximum"},
		{"exp -1e300", tok(func(c jwt.MapClaims) { c["exp"] = -1e300 }), codeAuthExpired, "token expired at -1e+300 (seconds since 1970)"},
		{"iat 1e300", tok(func(c jwt.MapClaims) { c["iat"] = 1e300 }), codeAuthGeneric, "token iat 1e+300 (seconds since 1970) is in the future"},
		{"iat -1e300", tok(func(c jwt.MapClaims) { c["iat"] = -1e300 }), codeAuthLifetime, "exceeds the maximum"},
		{"nbf 1e300", tok(func(c jwt.MapClaims) { c["nbf"] = 1e300 }), codeAuthGeneric, "not valid before 1e+300"},
		{"iat and exp 1e300", tok(func(c jwt.MapClaims) { c["iat"], c["exp"] = 1e300, 1e300 }), codeAuthGeneric, "in the future"},
		{"exp a string", tok(func(c jwt.MapClaims) { c["exp"] = "2030-01-01" }), codeAuthGeneric,
			"token has no valid exp claim: exp must be a number of seconds since 1970, got a string"},
		{"iat a boolean", tok(func(c jwt.MapClaims) { c["iat"] = true }), codeAuthGeneric, "iat must be a number of seconds since 1970, got a boolean"},
		{"nbf an object", tok(func(c jwt.MapClaims) { c["nbf"] = map[string]any{} }), codeAuthGeneric, "invalid nbf claim: nbf must be a number"},
		{"exp missing", tok(func(c jwt.MapClaims) { delete(c, "exp") }), codeAuthGeneric, "no valid exp claim: it is missing"},
		{"aud a number", tok(func(c jwt.MapClaims) { c["aud"] = 5 }), codeAuthAudience, "aud claim must be a string or a non-empty array of strings"},
	})
	now := float64(time.Now().UnixNano()) / 1e9
	expectAccepted(t, e.env, "fractional dates", tok(func(c jwt.MapClaims) {
		c["iat"], c["nbf"], c["exp"] = now-0.25, now-0.5, now+1800.75
	}))
	expectAccepted(t, e.env, "iat far in the past is fine within the lifetime", tok(func(c jwt.MapClaims) {
		c["iat"], c["exp"] = now-23*3600, now+3500
	}))
}

// TestUnknownKid pins the kid rule: a token whose kid no key has is
// refused (401 PSYNC_S2101, naming the kid), also when a kid-less secret
// (hs256_secrets) would verify its signature; a kid-less key never
// verifies a token with a kid.
func TestUnknownKid(t *testing.T) {
	t.Parallel()
	withKidKey := func(c *Config) {
		c.Auth.JWKS.Keys = []map[string]any{{"kty": "oct", "kid": "k1", "k": b64([]byte("kid-secret"))}}
	}
	e := newFakeEnv(t, todoRules, todoTables, withKidKey)
	expectAccepted(t, e.env, "kid k1", mint(t, "kid-secret", map[string]any{"kid": "k1"}, validClaims()))
	expectAccepted(t, e.env, "no kid, kid-less secret", mint(t, testSecret, nil, validClaims()))
	expectRefusals(t, e.srv, []refusal{
		{"unknown kid, kid-less secret", mint(t, testSecret, map[string]any{"kid": "other"}, validClaims()), codeAuthGeneric,
			`no key has the token's kid "other"`},
		{"unknown kid, other secret", mint(t, "stranger", map[string]any{"kid": "other"}, validClaims()), codeAuthGeneric,
			`no key has the token's kid "other"`},
		{"unknown kid, signed by k1's secret", mint(t, "kid-secret", map[string]any{"kid": "other"}, validClaims()), codeAuthGeneric,
			`kid "other"`},
		{"kid k1, kid-less secret", mint(t, testSecret, map[string]any{"kid": "k1"}, validClaims()), codeAuthGeneric, "signature is invalid"},
	})
	onlyKids := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
		withKidKey(c)
		c.Auth = config.Auth{Audience: c.Auth.Audience, JWKS: c.Auth.JWKS, MaxLifetime: c.Auth.MaxLifetime}
	})
	expectRefusals(t, onlyKids.srv, []refusal{
		{"unknown kid, no kid-less key", mint(t, testSecret, map[string]any{"kid": "other"}, validClaims()), codeAuthGeneric,
			`no key has the token's kid "other"`},
	})
}
