package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgtest"
	"github.com/syncpipe/syncpipe/internal/replication"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// TestStatusAfterSnapshot replicates a small data set and checks that
// `syncpipe status` shows the active group, both tables done, the lag and
// the slot's health.
func TestStatusAfterSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	if _, err := todos.Load(ctx, pgtest.Connect(t, source), todos.Size{Lists: 5, Todos: 100, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "syncpipe.yaml")
	yaml := fmt.Sprintf("source: {uri: %q}\nstorage: {uri: %q}\nsync_rules:\n  content: |\n%s", source, storage,
		"    "+strings.ReplaceAll(strings.TrimSpace(todos.Rules), "\n", "\n    ")+"\n")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: storage})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	done := make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	rep := replication.New(replication.Options{Config: cfg, Store: store, Role: "replication:snapshot", OnSnapshotDone: func(int) { close(done) }})
	errc := make(chan error, 1)
	go func() { errc <- rep.Run(rctx) }()
	select {
	case <-done:
	case err := <-errc:
		t.Fatalf("replication stopped: %v", err)
	}
	stop()
	<-errc

	code, out, stderr := runCLI(t, "status", "--config", path)
	if code != ExitOK {
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
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	relations := func() (n int) {
		t.Helper()
		if err := e.storage.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast'))
			+ (SELECT count(*) FROM pg_namespace WHERE nspname = 'syncpipe')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := relations()
	code, out := e.runOnceExit(ctx, "status")
	if after := relations(); after != before {
		t.Errorf("status changed the storage database: %d relations and syncpipe schemas before, %d after", before, after)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	re := regexp.MustCompile("^syncpipe status: storage postgres://\\S+ has no syncpipe schema \"syncpipe\" yet: start `syncpipe run` once to create it$")
	if code != ExitFailure || len(lines) != 1 || !re.MatchString(lines[0]) {
		t.Errorf("exit %d, output:\n%s\nwant exit %d and one line matching %s", code, out, ExitFailure, re)
	}
}
