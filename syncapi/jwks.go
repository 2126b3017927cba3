package syncapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// JWKS caching: keys fetched from jwks_uri are used for jwksTTL; a token
// whose kid is unknown triggers a refetch, at most once per
// jwksUnknownKidInterval (a flood of bogus kids must not turn into a flood
// of requests to the identity provider); after a failed fetch the next try
// waits jwksRetryInterval.
const (
	jwksTTL                = 30 * time.Minute
	jwksUnknownKidInterval = 30 * time.Second
	jwksRetryInterval      = 5 * time.Second
	jwksFetchTimeout       = 10 * time.Second
	jwksMaxBytes           = 1 << 20
)

// verifyKey is one key tokens may be verified with.
type verifyKey struct {
	kid  string
	key  any      // []byte (HMAC), *rsa.PublicKey or *ecdsa.PublicKey
	algs []string // algorithms the key verifies
}

func (k *verifyKey) allows(alg string) bool { return slices.Contains(k.algs, alg) }

// parseJWK turns one JSON Web Key (RFC 7517) into a verification key:
// kty RSA (RS256/384/512), EC (P-256 ES256, P-384 ES384, P-521 ES512) or
// oct (HS256). An "alg" member restricts the key to that algorithm; keys
// with "use" other than "sig" are rejected.
func parseJWK(m map[string]any) (*verifyKey, error) {
	str := func(name string) (string, error) {
		v, ok := m[name]
		if !ok {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s must be a string", name)
		}
		return s, nil
	}
	b64 := func(name string) ([]byte, error) {
		s, err := str(name)
		if err != nil {
			return nil, err
		}
		if s == "" {
			return nil, fmt.Errorf("missing %s", name)
		}
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%s is not base64url: %w", name, err)
		}
		return b, nil
	}
	kty, err := str("kty")
	if err != nil {
		return nil, err
	}
	kid, err := str("kid")
	if err != nil {
		return nil, err
	}
	if use, err := str("use"); err != nil || (use != "" && use != "sig") {
		return nil, fmt.Errorf("key %q: use %q is not sig", kid, use)
	}
	k := &verifyKey{kid: kid}
	switch kty {
	case "RSA":
		n, err := b64("n")
		if err != nil {
			return nil, fmt.Errorf("RSA key %q: %w", kid, err)
		}
		e, err := b64("e")
		if err != nil {
			return nil, fmt.Errorf("RSA key %q: %w", kid, err)
		}
		eInt := new(big.Int).SetBytes(e)
		if !eInt.IsInt64() || eInt.Int64() < 3 || eInt.Int64() > 1<<31-1 {
			return nil, fmt.Errorf("RSA key %q: unsupported exponent", kid)
		}
		k.key = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(eInt.Int64())}
		k.algs = []string{"RS256", "RS384", "RS512"}
	case "EC":
		crv, err := str("crv")
		if err != nil {
			return nil, err
		}
		var curve elliptic.Curve
		switch crv {
		case "P-256":
			curve, k.algs = elliptic.P256(), []string{"ES256"}
		case "P-384":
			curve, k.algs = elliptic.P384(), []string{"ES384"}
		case "P-521":
			curve, k.algs = elliptic.P521(), []string{"ES512"}
		default:
			return nil, fmt.Errorf("EC key %q: unsupported curve %q", kid, crv)
		}
		x, err := b64("x")
		if err != nil {
			return nil, fmt.Errorf("EC key %q: %w", kid, err)
		}
		y, err := b64("y")
		if err != nil {
			return nil, fmt.Errorf("EC key %q: %w", kid, err)
		}
		size := (curve.Params().BitSize + 7) / 8
		if len(x) > size || len(y) > size {
			return nil, fmt.Errorf("EC key %q: coordinates too long for %s", kid, crv)
		}
		point := make([]byte, 1+2*size)
		point[0] = 4 // uncompressed
		copy(point[1+size-len(x):1+size], x)
		copy(point[1+2*size-len(y):], y)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, fmt.Errorf("EC key %q: %w", kid, err)
		}
		k.key = pub
	case "oct":
		secret, err := b64("k")
		if err != nil {
			return nil, fmt.Errorf("oct key %q: %w", kid, err)
		}
		k.key, k.algs = secret, []string{"HS256"}
	case "":
		return nil, errors.New("missing kty")
	default:
		return nil, fmt.Errorf("key %q: unsupported kty %q", kid, kty)
	}
	alg, err := str("alg")
	if err != nil {
		return nil, err
	}
	if alg != "" {
		if !k.allows(alg) {
			return nil, fmt.Errorf("key %q: alg %q does not fit kty %s", kid, alg, kty)
		}
		k.algs = []string{alg}
	}
	return k, nil
}

// jwksState is one fetched key set.
type jwksState struct {
	keys    []*verifyKey
	fetched time.Time
}

// remoteJWKS caches the key set at a jwks_uri.
type remoteJWKS struct {
	uri    string
	client *http.Client
	log    *slog.Logger

	state atomic.Pointer[jwksState]

	mu            sync.Mutex // serialises fetches; guards the fields below
	lastForced    time.Time  // last refetch caused by an unknown kid
	lastFailure   time.Time
	lastFailureEr error
}

func newRemoteJWKS(uri string, log *slog.Logger) *remoteJWKS {
	return &remoteJWKS{uri: uri, client: &http.Client{Timeout: jwksFetchTimeout}, log: log}
}

func hasKid(st *jwksState, kid string) bool {
	return st != nil && slices.ContainsFunc(st.keys, func(k *verifyKey) bool { return k.kid == kid })
}

// keys returns the cached key set, fetching it when there is none or it
// is stale, or when wantKid is set, not in the set, and the unknown-kid
// refetch interval allows. A failed fetch keeps serving the previous set;
// the error is returned only when there is no set at all.
func (r *remoteJWKS) keys(ctx context.Context, wantKid string) ([]*verifyKey, error) {
	fresh := func(st *jwksState) bool {
		return st != nil && time.Since(st.fetched) < jwksTTL && (wantKid == "" || hasKid(st, wantKid))
	}
	if st := r.state.Load(); fresh(st) {
		return st.keys, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state.Load()
	if fresh(st) { // fetched by another request meanwhile
		return st.keys, nil
	}
	stale := st == nil || time.Since(st.fetched) >= jwksTTL
	if !stale && time.Since(r.lastForced) < jwksUnknownKidInterval {
		return st.keys, nil // the kid is unknown, but we asked recently
	}
	if time.Since(r.lastFailure) < jwksRetryInterval {
		if st != nil {
			return st.keys, nil
		}
		return nil, r.lastFailureEr
	}
	if !stale {
		r.lastForced = time.Now()
	}
	keys, err := r.fetch(ctx)
	if err != nil {
		r.lastFailure, r.lastFailureEr = time.Now(), err
		r.log.Warn("sync api: JWKS fetch failed", "uri", r.uri, "err", err)
		if st != nil {
			return st.keys, nil
		}
		return nil, err
	}
	r.state.Store(&jwksState{keys: keys, fetched: time.Now()})
	return keys, nil
}

// fetch downloads and parses the key set. Keys it cannot use (other key
// types, encryption keys) are skipped with a log line, not fatal.
func (r *remoteJWKS) fetch(ctx context.Context) ([]*verifyKey, error) {
	ctx, cancel := context.WithTimeout(ctx, jwksFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.uri, nil)
	if err != nil {
		return nil, fmt.Errorf("JWKS request for %s: %w", r.uri, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS from %s: %w", r.uri, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS from %s: HTTP %s", r.uri, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read JWKS from %s: %w", r.uri, err)
	}
	if len(body) > jwksMaxBytes {
		return nil, fmt.Errorf("JWKS at %s is larger than %d bytes", r.uri, jwksMaxBytes)
	}
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("JWKS at %s is not a JSON key set: %w", r.uri, err)
	}
	var keys []*verifyKey
	for i, m := range set.Keys {
		k, err := parseJWK(m)
		if err != nil {
			r.log.Warn("sync api: skipping JWKS key", "uri", r.uri, "index", i, "err", err)
			continue
		}
		keys = append(keys, k)
	}
	return keys, nil
}
