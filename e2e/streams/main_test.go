// Package streams holds the end-to-end tests of what the sync API serves
// from Sync Streams rules through the real binary: subscriptions and their
// priorities, edition 2's naming, checkpoint requests, the bucket and
// parameter-result limits, streams with several or nested lookups, the
// query shapes users write, and timestamp formats.
package streams

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
