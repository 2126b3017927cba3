// Package upgrade holds the end-to-end tests of moving to a new version of
// syncpipe on storage an earlier version wrote: the previous version is
// built from git (harness.BinaryAt), run on real PostgreSQL, stopped, and
// the current binary started on the same storage.
package upgrade

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
