// Package crash holds the end-to-end tests of how syncpipe survives what
// only a real process meets: SIGKILLs at random points of a snapshot, of a
// stream and inside transactions far larger than a batch; the slot or the
// publication taken away under a running process; forced stream failures;
// the memory a huge row leaves behind; and the exit path of an ordinary
// stop (SIGTERM, Ctrl-C), which must log no warning.
package crash

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
