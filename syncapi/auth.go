package syncapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncpipe/syncpipe/config"
)

// clockSkew is the tolerance on exp, iat and nbf, as PowerSync allows.
const clockSkew = 60 * time.Second

// supportedAlgs are the JWT algorithms accepted at all; each key narrows
// them further to its own type.
var supportedAlgs = []string{"HS256", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}

// PowerSync error codes used in responses (the SDKs show them).
const (
	codeAuthGeneric    = "PSYNC_S2101" // bad token, signature or claims
	codeAuthLifetime   = "PSYNC_S2102" // exp - iat above max_lifetime
	codeAuthExpired    = "PSYNC_S2103" // token expired
	codeAuthAudience   = "PSYNC_S2105" // aud does not match
	codeAuthMissing    = "PSYNC_S2106" // no token
	codeJWKSFailed     = "PSYNC_S2204" // the JWKS could not be fetched
	codeInternal       = "PSYNC_S2301" // internal error
	codeNoRules        = "PSYNC_S2302" // no usable sync rules
	codeTooManyConns   = "PSYNC_S2304" // max_concurrent_connections reached
	codeTooManyBuckets = "PSYNC_S2305" // max_buckets_per_connection exceeded
	codeBadRequest     = "PSYNC_S2001" // malformed request
	codeUnavailable    = "PSYNC_S2003" // service (storage, source) unavailable
)

// apiError is an error answered to the client with an HTTP status and a
// PowerSync error code.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func authErr(code, format string, args ...any) *apiError {
	return &apiError{status: 401, code: code, msg: fmt.Sprintf(format, args...)}
}

// identity is an authenticated client.
type identity struct {
	userID  string
	claims  []byte // the JWT payload, JSON: request.jwt() and token_parameters
	expires time.Time
}

// authenticator verifies client JWTs (SPEC §6): HS256 secrets and JSON Web
// Keys (inline or from a JWKS URI) chosen by kid, required sub, iat, exp
// and aud claims, a bounded lifetime and 60 s of clock skew.
type authenticator struct {
	audience    []string
	maxLifetime time.Duration
	now         func() time.Time
	static      []*verifyKey // hs256_secrets (kid-less) and inline JWKS keys
	remote      *remoteJWKS  // nil without jwks_uri
	parser      *jwt.Parser
}

func newAuthenticator(cfg config.Auth, now func() time.Time, log *slog.Logger) (*authenticator, error) {
	if len(cfg.Audience) == 0 {
		return nil, errors.New("api.auth.audience: at least one accepted audience is required (tokens must carry aud)")
	}
	a := &authenticator{audience: cfg.Audience, maxLifetime: cfg.MaxLifetime, now: now,
		parser: jwt.NewParser(jwt.WithValidMethods(supportedAlgs), jwt.WithoutClaimsValidation(), jwt.WithJSONNumber())}
	if a.maxLifetime <= 0 {
		a.maxLifetime = 24 * time.Hour
	}
	for i, s := range cfg.HS256Secrets {
		if s == "" {
			return nil, fmt.Errorf("api.auth.hs256_secrets[%d] is empty", i)
		}
		a.static = append(a.static, &verifyKey{key: []byte(s), algs: []string{"HS256"}})
	}
	for i, m := range cfg.JWKS.Keys {
		k, err := parseJWK(m)
		if err != nil {
			return nil, fmt.Errorf("api.auth.jwks.keys[%d]: %w", i, err)
		}
		a.static = append(a.static, k)
	}
	if cfg.JWKSURI != "" {
		a.remote = newRemoteJWKS(cfg.JWKSURI, log)
	}
	if len(a.static) == 0 && a.remote == nil {
		return nil, errors.New("api.auth: no keys configured (set hs256_secrets, jwks_uri or jwks.keys)")
	}
	return a, nil
}

// tokenFromHeader extracts the JWT of "Bearer <jwt>" or "Token <jwt>" (the
// SDKs send Token); the scheme is case-insensitive.
func tokenFromHeader(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !(strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "Token")) {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// errNoKey is the key function's error for a token no configured key can
// verify.
var errNoKey = errors.New("no matching key")

// authenticate verifies the Authorization header value.
func (a *authenticator) authenticate(ctx context.Context, header string) (identity, *apiError) {
	raw, ok := tokenFromHeader(header)
	if !ok {
		return identity{}, authErr(codeAuthMissing, "authentication required: send Authorization: Token <JWT> (or Bearer)")
	}
	// keyErr is the key function's own error, unwrapped by Parse's.
	var keyErr error
	tok, err := a.parser.Parse(raw, func(t *jwt.Token) (any, error) {
		if keyErr = checkCrit(t.Header); keyErr != nil {
			return nil, keyErr // before keysFor: such a token fetches no JWKS
		}
		keys, err := a.keysFor(ctx, t)
		keyErr = err
		return keys, err
	})
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenMalformed):
		return identity{}, authErr(codeAuthGeneric, "malformed token: %v", err)
	case keyErr != nil:
		if ae := (*apiError)(nil); errors.As(keyErr, &ae) {
			return identity{}, ae
		}
		return identity{}, authErr(codeAuthGeneric, "%v", keyErr)
	default:
		return identity{}, authErr(codeAuthGeneric, "invalid token: %v", err)
	}
	claims, _ := tok.Claims.(jwt.MapClaims)
	id, aerr := a.checkClaims(claims)
	if aerr != nil {
		return identity{}, aerr
	}
	// The payload as sent, for request.jwt() in sync rules; it was
	// already decoded once by Parse, so this cannot fail.
	if parts := strings.Split(raw, "."); len(parts) == 3 {
		id.claims, _ = a.parser.DecodeSegment(parts[1])
	}
	return id, nil
}

// keysFor picks the keys for a token: a token with a kid verifies only
// with the key of that kid (refetching the JWKS once for an unknown kid);
// a token without one with every kid-less key allowing its algorithm. An
// unknown kid is refused rather than tried with the kid-less keys (which
// the PowerSync service does): a kid names the key its issuer signed with,
// so a kid-less secret verifying it means a key mix-up, not a valid token.
func (a *authenticator) keysFor(ctx context.Context, t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	if kid != "" {
		return a.keyByKid(ctx, kid, alg)
	}
	var set jwt.VerificationKeySet
	for _, k := range a.static {
		if k.kid == "" && k.allows(alg) {
			set.Keys = append(set.Keys, k.key)
		}
	}
	if len(set.Keys) > 0 {
		return set, nil // e.g. HS256 dev tokens: no need for the JWKS
	}
	if a.remote != nil {
		keys, err := a.remote.keys(ctx, "")
		if err != nil {
			return nil, jwksUnavailable(err)
		}
		for _, k := range keys {
			if k.kid == "" && k.allows(alg) {
				set.Keys = append(set.Keys, k.key)
			}
		}
		if len(set.Keys) > 0 {
			return set, nil
		}
	}
	return nil, fmt.Errorf("%w: token has no kid and no kid-less key allows %s", errNoKey, alg)
}

// keyByKid is the key whose kid is kid: inline first, then from the JWKS
// URI (which refetches for a kid it does not have).
func (a *authenticator) keyByKid(ctx context.Context, kid, alg string) (any, error) {
	keys := a.static
	i := slices.IndexFunc(keys, func(k *verifyKey) bool { return k.kid == kid })
	if i < 0 && a.remote != nil {
		var err error
		if keys, err = a.remote.keys(ctx, kid); err != nil {
			return nil, jwksUnavailable(err)
		}
		i = slices.IndexFunc(keys, func(k *verifyKey) bool { return k.kid == kid })
	}
	if i < 0 {
		return nil, fmt.Errorf("%w: no key has the token's kid %q (a token with a kid verifies only with "+
			"the key of that kid, never with hs256_secrets): sign with a configured key and its kid, or send no kid", errNoKey, kid)
	}
	if !keys[i].allows(alg) {
		return nil, fmt.Errorf("%w: key %q does not allow alg %s", errNoKey, kid, alg)
	}
	return keys[i].key, nil
}

// jwksUnavailable is the error for a token that needed the JWKS URI's keys
// when they could not be fetched.
func jwksUnavailable(err error) error {
	return fmt.Errorf("%w: %w", errNoKey, &apiError{status: 401, code: codeJWKSFailed,
		msg: fmt.Sprintf("cannot verify token: JWKS unavailable: %v", err)})
}

// checkClaims validates the claims of a verified token.
func (a *authenticator) checkClaims(c jwt.MapClaims) (identity, *apiError) {
	sub, _ := c["sub"].(string)
	if sub == "" {
		return identity{}, authErr(codeAuthGeneric, "token has no sub claim (the user id, a non-empty string)")
	}
	exp, aerr := a.checkDates(c)
	if aerr != nil {
		return identity{}, aerr
	}
	if c["aud"] == nil {
		return identity{}, authErr(codeAuthAudience, "token has no aud claim; expected one of %q", a.audience)
	}
	// GetAudience reads a number as no audience at all: say what it is.
	aud, err := c.GetAudience()
	if err != nil || len(aud) == 0 {
		return identity{}, authErr(codeAuthAudience, "token aud claim must be a string or a non-empty array of strings; expected one of %q", a.audience)
	}
	if !slices.ContainsFunc(aud, func(s string) bool { return slices.Contains(a.audience, s) }) {
		return identity{}, authErr(codeAuthAudience, "token aud %q contains none of the accepted audiences %q", []string(aud), a.audience)
	}
	if p, ok := c["parameters"]; ok && p != nil {
		if _, isObj := p.(map[string]any); !isObj {
			return identity{}, authErr(codeAuthGeneric, "token parameters claim must be a JSON object")
		}
	}
	return identity{userID: sub, expires: exp}, nil
}

// checkDates checks iat, exp and nbf against the clock (with clockSkew)
// and the lifetime bound, in float seconds (numericDate says why), and
// returns exp. An exp that passes is at most iat + maxLifetime with iat
// at most now + clockSkew, so it converts to a time safely.
func (a *authenticator) checkDates(c jwt.MapClaims) (time.Time, *apiError) {
	iat, ok, err := numericDate(c, "iat")
	if err != nil || !ok {
		return time.Time{}, authErr(codeAuthGeneric, "token has no valid iat claim: %s", claimProblem(err))
	}
	exp, ok, err := numericDate(c, "exp")
	if err != nil || !ok {
		return time.Time{}, authErr(codeAuthGeneric, "token has no valid exp claim: %s", claimProblem(err))
	}
	now, skew := timeSeconds(a.now()), clockSkew.Seconds()
	if !(now < exp+skew) {
		return time.Time{}, authErr(codeAuthExpired, "token expired at %s", formatDate(exp))
	}
	if iat > now+skew {
		return time.Time{}, authErr(codeAuthGeneric, "token iat %s is in the future", formatDate(iat))
	}
	if nbf, ok, err := numericDate(c, "nbf"); err != nil {
		return time.Time{}, authErr(codeAuthGeneric, "token has an invalid nbf claim: %v", err)
	} else if ok && nbf > now+skew {
		return time.Time{}, authErr(codeAuthGeneric, "token is not valid before %s", formatDate(nbf))
	}
	// Negated so that NaN (cannot arise from JSON, but costs nothing) fails.
	if life := exp - iat; !(life <= a.maxLifetime.Seconds()) {
		return time.Time{}, authErr(codeAuthLifetime, "token lifetime exp - iat = %s exceeds the maximum of %s (api.auth.max_lifetime)",
			formatSeconds(life), a.maxLifetime)
	}
	return secondsToTime(exp), nil
}

// claimProblem completes "token has no valid X claim: ...".
func claimProblem(err error) string {
	if err == nil {
		return "it is missing (a number of seconds since 1970 is required)"
	}
	return err.Error()
}
