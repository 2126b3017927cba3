// Package workers holds the end-to-end tests of syncpipe's processes
// working together: roles, several replication processes sharing the
// work, fencing, priorities and idle streams.
package workers

import (
	"testing"

	"github.com/syncpipe/syncpipe/e2e/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
