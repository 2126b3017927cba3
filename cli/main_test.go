package cli

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestMain starts the test cluster on first use (TestAPIFailureStopsRoleAll
// runs the command in-process against it). The end-to-end tests of the
// binary are in e2e/....
func TestMain(m *testing.M) { pgtest.Main(m) }
