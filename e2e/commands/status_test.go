package commands

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestStatusAfterSnapshot replicates a small data set and checks that
// `syncpipe status` shows the active group, both tables done, the lag and
// the slot's health.
//
// (In cli it ran the replicator in-process until its OnSnapshotDone hook;
// here a `syncpipe run --role replication:snapshot` child runs until
// storage records the group's snapshot done, and is stopped.)
func TestStatusAfterSnapshot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 5, Todos: 100, Seed: 2}})
	p := e.StartRole("replication:snapshot")
	e.WaitFor(ctx, "the group's snapshot done", func() bool {
		var done bool
		err := e.Storage.QueryRow(ctx, "SELECT coalesce(bool_or(snapshot_done), false) FROM syncpipe.groups").Scan(&done)
		return err == nil && done
	})
	if err := p.Stop(); err != nil {
		t.Fatalf("syncpipe run --role replication:snapshot: %v", err)
	}

	code, out, stderr := harness.Run(t, ctx, "status", "--config", e.Config)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"PROCESSING", "syncpipe_1_", "done", "public.todos", "public.lists", "reserved"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

// TestStatusLeavesEmptyStorageAlone: `syncpipe status` against a storage
// database no `syncpipe run` has set up creates nothing there (it used to
// create the whole schema) and says so in one line, exiting 1: there is
// no status to show yet.
func TestStatusLeavesEmptyStorageAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{})
	relations := func() (n int) {
		t.Helper()
		if err := e.Storage.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast'))
			+ (SELECT count(*) FROM pg_namespace WHERE nspname = 'syncpipe')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := relations()
	code, out := runExit(t, ctx, e, "status")
	if after := relations(); after != before {
		t.Errorf("status changed the storage database: %d relations and syncpipe schemas before, %d after", before, after)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	re := regexp.MustCompile("^syncpipe status: storage postgres://\\S+ has no syncpipe schema \"syncpipe\" yet: start `syncpipe run` once to create it$")
	if code != cli.ExitFailure || len(lines) != 1 || !re.MatchString(lines[0]) {
		t.Errorf("exit %d, output:\n%s\nwant exit %d and one line matching %s", code, out, cli.ExitFailure, re)
	}
}

// runOK runs a one-shot syncpipe command (compact, status) with the Env's
// config and returns its output, stdout then stderr; it must succeed.
func runOK(t *testing.T, ctx context.Context, e *harness.Env, args ...string) string {
	t.Helper()
	code, out := runExit(t, ctx, e, args...)
	if code != cli.ExitOK {
		t.Fatalf("syncpipe %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// runExit runs a one-shot syncpipe command with the Env's config and
// returns its exit code and output, stdout then stderr.
func runExit(t *testing.T, ctx context.Context, e *harness.Env, args ...string) (int, string) {
	t.Helper()
	code, stdout, stderr := harness.Run(t, ctx, append(args, "--config", e.Config)...)
	return code, stdout + stderr
}
