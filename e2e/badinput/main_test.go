// Package badinput holds the end-to-end tests of what syncpipe says when
// its input is wrong: the bad-input catalogue (config and sync rules, the
// source, the storage, sync API clients; checked against the README's
// table), `syncpipe validate` against a source, the errors `status`
// shows, the remedies logged, and a source that is down when `run`
// starts.
package badinput

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
