// Package schema holds the end-to-end tests of syncpipe following the
// source's schema and its own rules while it runs, where the process
// shows: tables renamed, moved to another schema or re-created (followed
// by OID; status, /healthz and /metrics name the missing table), and sync
// rules reloaded on SIGHUP (a new group processed in the background while
// clients keep syncing; refused or warned-of rules in the logs and in
// status). Column changes are tested in-process, in replication
// (TestSchemaChanges).
package schema

import (
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }
