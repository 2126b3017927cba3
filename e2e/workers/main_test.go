// Package workers holds the end-to-end tests of syncpipe's processes
// working together: roles, several replication processes sharing the
// work, fencing a paused process out, and an idle stream's storage
// writes. Priorities between groups need no process boundary: they are
// tested in replication.
package workers

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
