// Package pgtest is the shared real-PostgreSQL harness for syncpipe's
// integration tests. A package opts in with
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and each test calls NewDB to get a database of its own, so tests may run in
// parallel. The cluster (see internal/pgcluster) starts on first use, once per
// test binary, and is stopped when the tests end, on Ctrl-C, and (through a
// parent-death signal) even when the test binary is killed.
//
// SYNCPIPE_TEST_DATABASE_URL points the tests at an existing server instead;
// its role must be allowed to create databases and replication slots.
//
// With `go test -short`, tests that need PostgreSQL are skipped: that is the
// `task test:short` mode for machines without a server. The default
// `go test ./...` never skips them; missing binaries fail with the install
// command.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = "SYNCPIPE_TEST_DATABASE_URL"

var (
	mu      sync.Mutex
	started bool
	cluster *pgcluster.Cluster
	baseURL *url.URL // URL of an admin database on the server
	initErr error
	dbSeq   atomic.Int64
)

// Main runs the package's tests and stops the shared cluster afterwards.
func Main(m *testing.M) { MainThen(m, nil) }

// MainThen is Main that also runs cleanup (when not nil) after the tests,
// or on Ctrl-C: for a harness that has more than the cluster to remove.
func MainThen(m *testing.M, cleanup func()) {
	done := func() {
		stop()
		if cleanup != nil {
			cleanup()
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		done()
		os.Exit(130)
	}()
	code := m.Run()
	done()
	os.Exit(code)
}

func stop() {
	mu.Lock()
	defer mu.Unlock()
	if cluster != nil {
		_ = cluster.Stop()
		cluster = nil
	}
}

// server returns the admin URL of the shared server, starting it on first use.
func server(t testing.TB) *url.URL {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		initErr = startServer()
	}
	if initErr != nil {
		t.Fatalf("pgtest: %v", initErr)
	}
	return baseURL
}

func startServer() error {
	if raw := os.Getenv(EnvURL); raw != "" {
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("%s is not a valid URL: %w", EnvURL, err)
		}
		baseURL = u
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return err
	}
	cluster = c
	baseURL, err = url.Parse(c.URI("postgres"))
	return err
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDB creates an empty database for this test and returns its URI. The
// database is dropped when the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	admin := server(t)
	name := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%s", dbSeq.Add(1), name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		t.Fatalf("pgtest: connect to test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDB(admin, name) })
	return WithDatabase(admin, name)
}

// dropDB removes a test database, first dropping replication slots that
// would otherwise keep it (and WAL) alive.
func dropDB(admin *url.URL, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
	_, _ = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// WithDatabase returns u with its database replaced by db.
func WithDatabase(u *url.URL, db string) string {
	c := *u
	c.Path = "/" + db
	return c.String()
}

// ReplicationURI returns uri with replication=database set, the form
// pgconn needs for a logical replication connection.
func ReplicationURI(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	return u.String()
}

// Connect opens a connection to uri that is closed when the test ends.
func Connect(t testing.TB, uri string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// BinDir returns the directory of the server binaries of the shared cluster
// (empty when tests use SYNCPIPE_TEST_DATABASE_URL).
func BinDir(t testing.TB) string {
	server(t)
	mu.Lock()
	defer mu.Unlock()
	if cluster == nil {
		return ""
	}
	return cluster.BinDir()
}
