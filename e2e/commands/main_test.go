// Package commands holds the end-to-end tests of syncpipe's commands as a
// user runs them: the demo (its own throwaway PostgreSQL, its --port, what
// it prints, how it cleans up), run's start-up, status, compact, token and
// validate, the README's quick start and the Kubernetes manifests — each
// through the real binary, its flags, output and exit codes.
package commands

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
