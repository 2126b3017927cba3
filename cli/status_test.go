package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"PROCESSING", "syncpipe_1_", "done", "public.todos", "public.lists", "reserved"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}
