package badinput

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// errorCellRunes is how much of a stored error the LAST ERROR column of
// `syncpipe status` shows (cli/status.go's errorCellRunes).
const errorCellRunes = 60

// writeStatusConfig writes a config for `syncpipe status` with the todo
// rules and returns its path.
func writeStatusConfig(t *testing.T, source, storage, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "syncpipe.yaml")
	yaml := fmt.Sprintf("source: {uri: %q}\nstorage: {uri: %q%s}\nsync_rules:\n  content: |\n    %s\n", source, storage, extra,
		strings.ReplaceAll(strings.TrimSpace(todos.Rules), "\n", "\n    "))
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStatusShowsStoredErrors: a group's stored replication error appears
// in the LAST ERROR column with its age, and in full (every line, the
// remedy at its end included) in the ERRORS section below the table.
func TestStatusShowsStoredErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: storage})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	failing, err := store.Catalog().CreateGroup(ctx, todos.Rules, "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	healthy, err := store.Catalog().CreateGroup(ctx, todos.Rules+"\n# v2\n", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	first := `logical decoding requires wal_level=logical on the source, it is "replica"`
	msg := first + `: set wal_level = logical in postgresql.conf and restart the source server` +
		"\nsee https://www.postgresql.org/docs/current/runtime-config-wal.html"
	if err := store.Catalog().ReportError(ctx, failing.ID, msg); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := harness.Run(t, ctx, "status", "--config", writeStatusConfig(t, source, storage, ""))
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows := map[int]string{}
	for _, l := range strings.Split(out, "\n") {
		var id int
		if _, err := fmt.Sscanf(l, "%d ", &id); err == nil && strings.Contains(l, "PROCESSING") {
			rows[id] = l
		}
	}
	cell := "s ago: " + string([]rune(first)[:errorCellRunes]) + "…"
	if !strings.Contains(rows[failing.ID], cell) {
		t.Errorf("group %d's row lacks %q:\n%s", failing.ID, cell, out)
	}
	if !strings.HasSuffix(strings.TrimSpace(rows[healthy.ID]), "—") {
		t.Errorf("group %d (no error) does not show —:\n%s", healthy.ID, out)
	}
	_, section, ok := strings.Cut(out, "\nERRORS\n")
	if !ok {
		t.Fatalf("no ERRORS section:\n%s", out)
	}
	head := fmt.Sprintf("group %d (PROCESSING), ", failing.ID)
	for _, want := range []string{head, "s ago, at 20", "\n    " + strings.ReplaceAll(msg, "\n", "\n    ") + "\n"} {
		if !strings.Contains(section, want) {
			t.Errorf("ERRORS section lacks %q:\n%s", want, section)
		}
	}
	if strings.Contains(section, fmt.Sprintf("group %d ", healthy.ID)) {
		t.Errorf("ERRORS section lists group %d, which has no error:\n%s", healthy.ID, section)
	}
}

// TestStatusStorageConnectTimeout: a storage server that accepts the TCP
// connection and never answers makes `syncpipe status` fail after
// storage.connect_timeout instead of hanging.
func TestStatusStorageConnectTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn // open and silent until the test ends
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	const timeout = time.Second
	storage := fmt.Sprintf("postgres://syncpipe@%s/syncpipe?sslmode=disable", ln.Addr())
	path := writeStatusConfig(t, "postgres://syncpipe@127.0.0.1:1/app", storage, fmt.Sprintf(", connect_timeout: %s", timeout))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	harness.Binary(t) // built before the clock starts
	start := time.Now()
	code, _, stderr := harness.Run(t, ctx, "status", "--config", path)
	took := time.Since(start)
	if code != cli.ExitFailure || !strings.Contains(stderr, "storage unreachable") {
		t.Fatalf("exit %d, stderr %q; want %d and storage unreachable", code, stderr, cli.ExitFailure)
	}
	// Well below the 10 s default: the configured timeout was applied.
	// The margin (5 s) covers a -race binary's start-up on 2 busy cores.
	if took < timeout || took > timeout+5*time.Second {
		t.Fatalf("status failed after %s, want about storage.connect_timeout (%s)", took, timeout)
	}
	mu.Lock()
	n := len(held)
	mu.Unlock()
	if n == 0 {
		t.Fatal("status never connected to the silent storage server")
	}
}
