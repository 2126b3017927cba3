// Package schema holds the end-to-end tests of syncpipe following the
// source's schema and its own rules while it runs: columns added, dropped
// and retyped, tables renamed, moved to another schema or re-created
// (followed by OID), and sync rules reloaded on SIGHUP (a new group
// processed in the background while clients keep syncing, refused or
// warned-of rules).
package schema

import (
	"testing"

	"github.com/syncpipe/syncpipe/e2e/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
