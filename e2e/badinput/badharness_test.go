package badinput

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/testkit/torture"
)

// badHarness holds what rows share: the fixture directory, databases, the
// shared sync API process, and two more PostgreSQL servers for what the
// test server cannot show (wal_level = replica with password
// authentication; slots invalidated 1 MB behind).
type badHarness struct {
	dir string // cli/testdata/badinput, absolute: the children's working directory

	api     *badAPI
	replica func() (*replicaServer, error)
	lossy   func() (*pgcluster.Cluster, error)
	// source (holding items) and storage are the databases rows share,
	// each process in a namespace of its own (see shared).
	source, storage string
	namespaces      int
	admin           string // a database of the test server to create others from
	dbs             int    // databases created

	mu sync.Mutex
}

func newBadHarness(t *testing.T) *badHarness {
	h := &badHarness{dir: filepath.Join(harness.Root(t), "cli", "testdata", "badinput")}
	harness.Binary(t)         // built before the rows start their children
	h.admin = pgtest.NewDB(t) // the shared server is up
	h.replica = sync.OnceValues(startReplicaServer(t))
	h.lossy = sync.OnceValues(startLossyServer(t))
	var bg sync.WaitGroup
	bg.Go(func() { // initdb takes seconds: start them now, one after the other
		_, _ = h.replica()
		_, _ = h.lossy()
	})
	// Whatever starts in the background registers cleanups on t: it ends
	// before the test does, even one that fails.
	t.Cleanup(bg.Wait)
	h.source, h.storage, _ = h.badDBs(t, itemsSQL...)
	h.api = h.startAPI(t, "")
	return h
}

// schema is the environment giving a process a storage schema of its own.
func (h *badHarness) schema() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.namespaces++
	return fmt.Sprintf("BADINPUT_SCHEMA=badinput%d", h.namespaces)
}

// shared is the environment of a process on the shared source and
// storage databases: a storage schema, a publication and a slot prefix
// of its own.
func (h *badHarness) shared() []string {
	s := h.schema()
	name := strings.TrimPrefix(s, "BADINPUT_SCHEMA=")
	return []string{s, "BADINPUT_PUBLICATION=" + name, "BADINPUT_SLOT_PREFIX=" + name + "_"}
}

// badEnv is the environment the fixtures' ${VAR}s are filled from.
func badEnv(source, storage string, more ...string) []string {
	return append([]string{"BADINPUT_SOURCE=" + source, "BADINPUT_STORAGE=" + storage, "BADINPUT_SECRET=" + harness.Secret}, more...)
}

// badDBs creates a source database (with the statements run in it) and
// a storage database, returning their URIs and a connection to the source.
func (h *badHarness) badDBs(t *testing.T, sourceSQL ...string) (source, storage string, conn *pgx.Conn) {
	t.Helper()
	source, conn = h.badSource(t, sourceSQL...)
	return source, h.newDB(t), conn
}

// newDB creates an empty database on the test server, dropped when t
// ends. Unlike pgtest.NewDB it copies the template's files (STRATEGY
// FILE_COPY) instead of writing them to the WAL, which every logical
// walsender of the server then reads: with a dozen syncpipe processes
// streaming, that is seconds a database.
func (h *badHarness) newDB(t *testing.T) string {
	t.Helper()
	h.mu.Lock()
	h.dbs++
	name := fmt.Sprintf("badinput_%d_%d", os.Getpid(), h.dbs)
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, h.admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" STRATEGY FILE_COPY")
	if err != nil && strings.Contains(err.Error(), "42601") { // before PostgreSQL 15: no STRATEGY, always a file copy
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	}
	admin.Close(ctx)
	if err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, h.admin)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		_, _ = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(h.admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// badSource creates a source database with the statements run in it.
func (h *badHarness) badSource(t *testing.T, sql ...string) (string, *pgx.Conn) {
	t.Helper()
	source := h.newDB(t)
	conn := pgtest.Connect(t, source)
	for _, q := range sql {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return source, conn
}

// itemsSQL is the source of the rows that need a healthy one.
var itemsSQL = []string{
	`CREATE TABLE items (id text PRIMARY KEY, name text)`,
	`INSERT INTO items VALUES ('a', 'first'), ('b', 'second')`,
}

// badProc is one syncpipe child process (harness.Start) with its JSON
// log lines parsed as they come.
type badProc struct {
	*harness.Proc
	env []string // what it was started with, besides the test's environment

	mu   sync.Mutex
	recs []logRec
}

// logRec is one JSON log line.
type logRec map[string]any

func (r logRec) str(k string) string { s, _ := r[k].(string); return s }

// said renders a log line as the table shows it: level, message, error.
func (r logRec) said() string {
	s := r.str("level") + " " + r.str("msg")
	if e := r.str("err"); e != "" {
		s += ": " + e
	}
	return s
}

// start runs `syncpipe args…` in the fixture directory with env; it is
// killed when t ends if it still runs.
func (h *badHarness) start(t *testing.T, env []string, args ...string) *badProc {
	t.Helper()
	p := &badProc{env: env}
	p.Proc = harness.Start(t, harness.ProcConfig{Args: args, Env: env, Dir: h.dir, OnLine: func(line []byte) {
		var rec logRec
		if json.Unmarshal(line, &rec) != nil || rec == nil {
			return
		}
		p.mu.Lock()
		p.recs = append(p.recs, rec)
		p.mu.Unlock()
	}})
	return p
}

// wait waits for the process to exit (within d) and returns its exit
// code and stderr.
func (p *badProc) wait(t *testing.T, d time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	select {
	case <-p.Exited():
	case <-ctx.Done():
		t.Fatalf("syncpipe still runs after %s; stderr:\n%s", d, p.Tail(4<<10))
	}
	return p.Wait(ctx), p.Logs()
}

// running fails t if the process has exited.
func (p *badProc) running(t *testing.T) {
	t.Helper()
	if !p.Running() {
		t.Fatalf("syncpipe exited (%v); stderr:\n%s", p.Err(), p.Tail(4<<10))
	}
}

// find returns the first log line that match accepts, if any.
func (p *badProc) find(match func(logRec) bool) (logRec, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.recs {
		if match(r) {
			return r, true
		}
	}
	return nil, false
}

// waitLog waits (within d) for a log line that match accepts, failing
// when the process exits first.
func (p *badProc) waitLog(t *testing.T, d time.Duration, what string, match func(logRec) bool) logRec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var rec logRec
	// Every line is parsed before the process counts as exited, so a
	// line logged as it exits is found.
	harness.Poll(t, ctx, p.Proc, what, func() bool {
		var ok bool
		rec, ok = p.find(match)
		return ok
	})
	return rec
}

// logMatch accepts a line of the level whose message and error match re.
func logMatch(level string, re *regexp.Regexp) func(logRec) bool {
	return func(r logRec) bool { return r.str("level") == level && re.MatchString(r.said()) }
}

// apiAddr waits for the process's sync API to listen and returns where.
func (p *badProc) apiAddr(t *testing.T) string {
	t.Helper()
	return p.waitLog(t, time.Minute, "sync API listening", func(r logRec) bool { return r.str("msg") == "sync API listening" }).str("addr")
}

// startValidate starts `syncpipe validate --config file` against the
// shared source.
func (h *badHarness) startValidate(t *testing.T, file string) *badProc {
	t.Helper()
	return h.start(t, badEnv(h.source, "postgres://syncpipe@127.0.0.1:1/storage?sslmode=disable"),
		"validate", "--config", file)
}

// startRun starts `syncpipe run --config run.yaml` with the databases
// and more environment.
func (h *badHarness) startRun(t *testing.T, source, storage string, env ...string) *badProc {
	t.Helper()
	return h.start(t, badEnv(source, storage, env...), "run", "--config", "run.yaml")
}

// waitHealth polls /healthz (within d) until cond accepts its answer,
// failing if the process exits first.
func waitHealth(t *testing.T, p *badProc, addr string, d time.Duration, what string, cond func(code int, body string) bool) (int, string) {
	t.Helper()
	deadline := time.After(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p.running(t)
		code, body := harness.Get(context.Background(), addr, "/healthz", "")
		if cond(code, body) {
			return code, body
		}
		select {
		case <-deadline:
			t.Fatalf("/healthz: no %s within %s (last: %d %s); stderr:\n%s", what, d, code, body, p.Tail(4<<10))
		case <-tick.C:
		}
	}
}

// healthReason is the first reason of a degraded /healthz body.
func healthReason(t *testing.T, body string) string {
	t.Helper()
	var h struct {
		Status  string `json:"status"`
		Error   string `json:"error"`
		Reasons []struct {
			Error string `json:"error"`
		} `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("/healthz body %q: %v", body, err)
	}
	if len(h.Reasons) > 0 {
		return h.Reasons[0].Error
	}
	return h.Error
}

// streaming waits until the process streams from its slot (the snapshot
// is done) and its /healthz is ok, returning the API's address.
func streaming(t *testing.T, p *badProc) string {
	t.Helper()
	addr := p.apiAddr(t)
	p.waitLog(t, time.Minute, "streaming from the slot", func(r logRec) bool { return r.str("msg") == "streaming from the replication slot" })
	waitHealth(t, p, addr, time.Minute, "ok", func(code int, body string) bool { return code == 200 && strings.Contains(body, `"status":"ok"`) })
	return addr
}

// cutProxy forwards TCP connections to a server until cut: closing it
// closes every connection and the listener, so the server becomes
// unreachable (connection refused).
type cutProxy struct{ *torture.Proxy }

func newCutProxy(t *testing.T, target string) cutProxy {
	t.Helper()
	p, err := torture.NewProxy("cut", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return cutProxy{p}
}

func (p cutProxy) cutOff() { p.Close() }

// via returns uri with its host replaced by the proxy's.
func (p cutProxy) via(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return u.String()
}

// hostOf is the host:port of a URI.
func hostOf(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// startLossyServer returns the function that starts (once) a third
// server, whose replication slots the server invalidates once they are
// 1 MB behind (max_slot_wal_keep_size), with a database lossy_source
// holding items. It is stopped when t ends.
func startLossyServer(t *testing.T) func() (*pgcluster.Cluster, error) {
	return func() (*pgcluster.Cluster, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
			"max_slot_wal_keep_size": "'1MB'", "shared_buffers": "32MB", "max_connections": "50"}})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Stop() })
		if err := c.CreateDatabase(ctx, "lossy_source"); err != nil {
			return nil, err
		}
		if err := execAll(ctx, c.URI("lossy_source"), itemsSQL...); err != nil {
			return nil, err
		}
		return c, nil
	}
}

// execAll runs the statements in the database at uri.
func execAll(ctx context.Context, uri string, sql ...string) error {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range sql {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// replicaServer is a second PostgreSQL server with wal_level = replica
// and password authentication for the role badinput (the superuser still
// trusted), for the rows the shared server cannot show.
type replicaServer struct {
	c *pgcluster.Cluster
}

const (
	replicaRole     = "badinput"
	replicaPassword = "the-right-password"
)

// uri is a URI of database db on the server as the badinput role with
// password.
func (r *replicaServer) uri(db, password string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", replicaRole, password, r.c.Port(), db)
}

// startReplicaServer returns the function that starts the server (once),
// stopped when t ends.
func startReplicaServer(t *testing.T) func() (*replicaServer, error) {
	return func() (*replicaServer, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{
			"wal_level": "replica", "shared_buffers": "32MB", "max_connections": "50"}})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Stop() })
		hba := "host all postgres 127.0.0.1/32 trust\nhost replication postgres 127.0.0.1/32 trust\n" +
			"host all all 127.0.0.1/32 scram-sha-256\nhost replication all 127.0.0.1/32 scram-sha-256\n"
		if err := os.WriteFile(filepath.Join(c.Dir(), "data", "pg_hba.conf"), []byte(hba), 0o644); err != nil {
			return nil, err
		}
		if err := execAll(ctx, c.URI("postgres"), "SELECT pg_reload_conf()",
			fmt.Sprintf("CREATE ROLE %s LOGIN REPLICATION PASSWORD '%s'", replicaRole, replicaPassword),
			"CREATE DATABASE replica_source OWNER "+replicaRole); err != nil {
			return nil, err
		}
		r := &replicaServer{c: c}
		// The reload is asynchronous: wait (polling, within ctx) until a
		// wrong password fails.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			wc, err := pgx.Connect(ctx, r.uri("replica_source", "wrong"))
			if err != nil && strings.Contains(err.Error(), "28P01") {
				break
			}
			if wc != nil {
				wc.Close(ctx)
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("password authentication never took effect: %v", err)
			case <-tick.C:
			}
		}
		if err := execAll(ctx, r.uri("replica_source", replicaPassword), itemsSQL...); err != nil {
			return nil, err
		}
		return r, nil
	}
}
