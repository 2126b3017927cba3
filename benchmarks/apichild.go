package benchmarks

import (
	"context"
	"fmt"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
)

// apiChildConfig is what a `syncpipe run --role api` child serves: the
// storage database and the benchmark's own token settings. The API reads
// each group's sync rules from storage, so the config's rules only need to
// compile.
type apiChildConfig struct {
	Storage          string
	Secret, Audience string
	MaxBuckets       int
	MaxConnections   int
	CacheSize        int // checksum_cache_size; 0 = the default
}

// apiChildRules satisfy `syncpipe run`'s rules check.
const apiChildRules = `bucket_definitions:
  global:
    data:
      - SELECT * FROM lists
`

// startAPIChild runs the sync API as its own `syncpipe run --role api`
// process on a free loopback port, so that its peak RSS is measured apart
// from the harness (P6), and returns it with its base URL once it listens.
func (h *Harness) startAPIChild(ctx context.Context, c apiChildConfig) (*Child, string, error) {
	port, err := pgcluster.FreePort()
	if err != nil {
		return nil, "", err
	}
	cache := ""
	if c.CacheSize > 0 {
		cache = fmt.Sprintf("\n  checksum_cache_size: %d", c.CacheSize)
	}
	// The source URI is required but unused: the API connects to the source
	// only for write checkpoints, lazily.
	cfg := fmt.Sprintf(`source: {uri: %q}
storage: {uri: %q, max_conns: 32}
sync_rules:
  content: |
%s
api:
  listen: "127.0.0.1:%d"
  auth: {audience: [%q], hs256_secrets: [%q], max_lifetime: 24h}
  max_buckets_per_connection: %d
  max_concurrent_connections: %d%s
telemetry: {metrics_listen: ""}
log: {level: info, format: json}
`, c.Storage, c.Storage, indent(apiChildRules, "    "), port, c.Audience, c.Secret, max(c.MaxBuckets, 1000), max(c.MaxConnections, 200), cache)
	return startListening(ctx, h.childOptions(cfg, "api"), port)
}

// startListening starts a child whose config serves the sync API on the
// loopback port and returns it with its base URL once it listens.
func startListening(ctx context.Context, opt ChildOptions, port int) (*Child, string, error) {
	child, err := StartChild(ctx, opt)
	if err != nil {
		return nil, "", err
	}
	if _, err := child.WaitFor(ctx, "sync API listening"); err != nil {
		_, _ = child.Stop()
		return nil, "", err
	}
	return child, fmt.Sprintf("http://127.0.0.1:%d", port), nil
}
