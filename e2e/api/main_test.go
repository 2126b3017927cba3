// Package api holds the end-to-end tests of what a running syncpipe
// process shows its clients and operators: the sync API's hardening
// against slow clients (bounded connections and file descriptors), its
// lifecycle (health, graceful shutdown), token checks at start-up and per
// request, the timeouts that bound its database connections, /metrics,
// `-trace stdout`, and the sync API's WebSocket transport (its connection
// limit, keepalives, metrics and memory per slow client), and a slow
// client's first download spanning a takeover.
package api

import (
	"os"
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) {
	// The test binary re-executed as a slow-body attacker (see runAttack):
	// a client, not syncpipe.
	if spec := os.Getenv(attackEnv); spec != "" {
		os.Exit(runAttack(spec))
	}
	harness.Main(m)
}
