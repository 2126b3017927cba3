package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncpipe/syncpipe/config"
)

// runToken mints a development JWT signed with the first configured HS256
// secret, with the claims the sync API requires (sub, iat, exp, aud).
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("token", stderr)
	path := configFlag(fs)
	sub := fs.String("sub", "", "user id (the JWT sub claim; request.user_id() in sync rules) (required)")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *sub == "" {
		return usagef("token: --sub is required")
	}
	if *ttl <= 0 {
		return usagef("token: --ttl must be positive")
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return err
	}
	auth := cfg.API.Auth
	if len(auth.HS256Secrets) == 0 {
		return usagef("token: api.auth.hs256_secrets is empty: add a secret to mint development tokens")
	}
	if cfg.API.Auth.MaxLifetime > 0 && *ttl > auth.MaxLifetime {
		return usagef("token: --ttl %s exceeds api.auth.max_lifetime %s; the API would reject the token", *ttl, auth.MaxLifetime)
	}
	signed, err := mintToken(auth, *sub, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, signed)
	return nil
}

// mintToken signs a development JWT with the first HS256 secret.
func mintToken(auth config.Auth, sub string, ttl time.Duration) (string, error) {
	now := time.Now()
	claims := jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(ttl).Unix()}
	if len(auth.Audience) > 0 {
		claims["aud"] = auth.Audience[0]
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(auth.HS256Secrets[0]))
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return signed, nil
}
