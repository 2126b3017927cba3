package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/pgtest"
)

// The bad-input catalogue (issue 17): for each way a user can get syncpipe's
// input wrong — its config and sync rules, the source, the storage, a sync
// API client — what syncpipe says and with which exit code or HTTP status.
// Every row drives the real binary (this test binary re-executed as
// syncpipe, see TestMain) against the test cluster, asserts the code and
// the shape of the message, and records what was said, normalised, in the
// README table between the BAD-INPUT CATALOGUE markers (-update rewrites
// it; without it the test fails when the table is stale).
//
// Rows may start slow work (a process coming up, a connection waiting for
// a server timeout) before any row is checked, so that the waits overlap:
// `go test` runs at most GOMAXPROCS parallel subtests, and most of a row's
// time is spent waiting.

// badRow is one row of the catalogue.
type badRow struct {
	group string // the table's section
	input string // Markdown: what the user got wrong
	// start begins the row (before any row is checked) and returns its
	// check, which asserts what syncpipe did and returns what it said and
	// its exit code or HTTP status, for the table.
	start func(t *testing.T, h *badHarness) badCheck
}

type badCheck func(t *testing.T) (said, code string)

// now makes a row that has nothing to start.
func now(check func(t *testing.T, h *badHarness) (said, code string)) func(*testing.T, *badHarness) badCheck {
	return func(_ *testing.T, h *badHarness) badCheck {
		return func(t *testing.T) (string, string) { return check(t, h) }
	}
}

// badGroups orders the sections of the table.
var badGroups = []string{"Configuration and sync rules", "Source", "Storage", "Sync API"}

func TestBadInputCatalogue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	start := time.Now()
	h := newBadHarness(t)
	// Whatever the rows do in the background registers cleanups: it ends
	// before the test does, even one that fails.
	defer h.bg.Wait()
	t.Logf("harness started in %s", time.Since(start).Round(100*time.Millisecond))
	rows := badRows()
	checks := make([]badCheck, len(rows))
	for i, r := range rows {
		began := time.Now()
		checks[i] = r.start(t, h)
		if d := time.Since(began); d > 500*time.Millisecond {
			t.Logf("starting %q took %s", badName(r.input), d.Round(10*time.Millisecond))
		}
	}
	t.Logf("rows started in %s", time.Since(start).Round(100*time.Millisecond))
	type result struct{ said, code string }
	results := make([]*result, len(rows))
	for i, r := range rows {
		t.Run(badName(r.input), func(t *testing.T) {
			said, code := checks[i](t)
			results[i] = &result{normaliseSaid(said), code}
		})
	}
	t.Logf("%d rows in %s", len(rows), time.Since(start).Round(100*time.Millisecond))
	var b strings.Builder
	for _, g := range badGroups {
		fmt.Fprintf(&b, "\n**%s**\n\n| Input | syncpipe says | Exit code / HTTP status |\n| --- | --- | --- |\n", g)
		for i, r := range rows {
			if r.group != g {
				continue
			}
			if results[i] == nil {
				return // a failed (or, with -run, skipped) row: the table stays as it is
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.input, mdCode(results[i].said), results[i].code)
		}
	}
	badReadme(t, strings.TrimPrefix(b.String(), "\n"))
}

// badName is a subtest name for an input: its words, without Markdown.
func badName(input string) string {
	s := regexp.MustCompile(`\]\([^)]*\)|[\x60\[\]*]`).ReplaceAllString(input, "")
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	return s
}

// mdCode renders a message as a Markdown code span inside a table cell.
func mdCode(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

const (
	badReadmeBegin = "<!-- BEGIN BAD-INPUT CATALOGUE"
	badReadmeEnd   = "<!-- END BAD-INPUT CATALOGUE -->"
)

// badReadme checks (with -update: rewrites) the README's catalogue.
func badReadme(t *testing.T, table string) {
	t.Helper()
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, badReadmeBegin), strings.Index(s, badReadmeEnd)
	if i < 0 || j < i {
		t.Fatalf("README lacks the %s … %s markers", badReadmeBegin, badReadmeEnd)
	}
	i += strings.Index(s[i:], "\n") + 1
	want := "\n" + table + "\n"
	if s[i:j] == want {
		return
	}
	if !*update {
		t.Fatalf("the README's bad-input catalogue is stale; run: go test ./cli -run TestBadInputCatalogue -update\n--- want\n%s--- README has\n%s", want, s[i:j])
	}
	if err := os.WriteFile(path, []byte(s[:i]+want+s[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
}

// saidNormalisers replace what differs between runs: ports, database
// names, role names, times, positions in the WAL, process ids, slot name suffixes,
// the size and the number of the batch a storage write failed on.
var saidNormalisers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b(127\.0\.0\.1|localhost):\d+`), "$1:<port>"},
	{regexp.MustCompile(`\(127\.0\.0\.1\):? `), ""},
	{regexp.MustCompile(`\b(t\d+_[a-z0-9_]+|badinput_\d+_\d+)\b`), "<db>"},
	{regexp.MustCompile(`\bbadinput_reader_\d+\b`), "<role>"}, // a role per test process
	{regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d(:\d\d)?)?`), "<time>"},
	{regexp.MustCompile(`\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b`), "<lsn>"},
	{regexp.MustCompile(`\b(pid|PID)[ =]\d+`), "$1 <pid>"},
	{regexp.MustCompile(`\b(syncpipe_\d+)_[0-9a-f]{4}\b`), "${1}_<random>"}, // slot names
	{regexp.MustCompile(`\bwrite \d+ changes\b`), "write <n> changes"},      // a batch: the change, or a heartbeat before it
	{regexp.MustCompile(`\bbatch \d+: (write|read)\b`), "batch <n>: $1"},    // how many batches (keepalives) the stream passed first
}

func normaliseSaid(s string) string {
	s = strings.TrimSpace(s)
	for _, n := range saidNormalisers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ↵ ")), " ")
}

// badHarness holds what rows share: the fixture directory, the binary,
// databases, the shared sync API process, and two more PostgreSQL servers
// for what the test server cannot show (wal_level = replica with password
// authentication; slots invalidated 1 MB behind).
type badHarness struct {
	t   *testing.T // the catalogue's test: shared things end with it
	dir string     // testdata/badinput, absolute: the children's working directory
	bin string     // this test binary, absolute

	api     *badAPI
	replica func() (*replicaServer, error)
	lossy   func() (*pgcluster.Cluster, error)
	// source (holding items) and storage are the databases rows share,
	// each process in a namespace of its own (see shared).
	source, storage string
	namespaces      int
	admin           string // a database of the test server to create others from
	dbs             int    // databases created

	bg    sync.WaitGroup // goroutines that start servers or processes
	mu    sync.Mutex
	procs []*badProc // the children started for the whole test, to be stopped together
}

func newBadHarness(t *testing.T) *badHarness {
	dir, err := filepath.Abs(filepath.Join("testdata", "badinput"))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	h := &badHarness{t: t, dir: dir, bin: bin}
	h.admin = pgtest.NewDB(t) // the shared server is up
	h.replica = sync.OnceValues(startReplicaServer(t))
	h.lossy = sync.OnceValues(startLossyServer(t))
	h.bg.Go(func() { // initdb takes seconds: start them now, one after the other
		_, _ = h.replica()
		_, _ = h.lossy()
	})
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
	return append([]string{"BADINPUT_SOURCE=" + source, "BADINPUT_STORAGE=" + storage, "BADINPUT_SECRET=" + testSecret}, more...)
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

// badProc is one syncpipe child process, its stderr collected and its
// JSON log lines parsed.
type badProc struct {
	env    []string // what it was started with, besides os.Environ
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has exited
	code   int           // its exit code, after exited

	stdout bytes.Buffer // to be read once exited is closed

	mu     sync.Mutex
	stderr bytes.Buffer
	recs   []logRec
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
// stopped (SIGTERM, then SIGKILL) when t ends.
func (h *badHarness) start(t *testing.T, env []string, args ...string) *badProc {
	t.Helper()
	p, err := h.spawn(t, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// spawn is start for any goroutine: it fails with an error, not t.
func (h *badHarness) spawn(t *testing.T, env []string, args ...string) (*badProc, error) {
	cmd := exec.Command(h.bin, "-test.run=^$")
	cmd.Dir = h.dir
	cmd.Env = append(append(os.Environ(), env...), childEnv+"="+strings.Join(args, "\x1f"))
	p := &badProc{env: env, cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout = &p.stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if t != h.t {
		t.Cleanup(p.stop)
	} else {
		h.mu.Lock()
		h.procs = append(h.procs, p)
		h.mu.Unlock()
		t.Cleanup(func() { h.stopAll(); p.stop() })
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Bytes()
			var rec logRec
			_ = json.Unmarshal(line, &rec)
			p.mu.Lock()
			p.stderr.Write(line)
			p.stderr.WriteByte('\n')
			if rec != nil {
				p.recs = append(p.recs, rec)
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	return p, nil
}

// stopAll signals every child the catalogue's test started, so that they
// stop together, not one after the other.
func (h *badHarness) stopAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.procs {
		_ = q.cmd.Process.Signal(syscall.SIGTERM)
	}
	h.procs = nil
}

// stop ends the process: SIGTERM, SIGKILL after 10 s.
func (p *badProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *badProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// wait waits for the process to exit (within d) and returns its exit
// code and stderr.
func (p *badProc) wait(t *testing.T, d time.Duration) (int, string) {
	t.Helper()
	select {
	case <-p.exited:
		return p.code, p.output()
	case <-time.After(d):
		t.Fatalf("syncpipe still runs after %s; stderr:\n%s", d, tail(p.output(), 4<<10))
		return 0, ""
	}
}

// running fails t if the process has exited.
func (p *badProc) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("syncpipe exited (code %d); stderr:\n%s", p.code, tail(p.output(), 4<<10))
	default:
	}
}

// waitLog polls (within d) for a log line that match accepts, failing
// when the process exits first.
func (p *badProc) waitLog(t *testing.T, d time.Duration, what string, match func(logRec) bool) logRec {
	t.Helper()
	deadline := time.Now().Add(d)
	seen := 0
	for {
		p.mu.Lock()
		recs := p.recs[seen:]
		p.mu.Unlock()
		for _, r := range recs {
			if match(r) {
				return r
			}
		}
		seen += len(recs)
		select {
		case <-p.exited:
			p.mu.Lock()
			n := len(p.recs)
			p.mu.Unlock()
			if n > seen {
				continue // lines read after the last look
			}
			t.Fatalf("waiting for %s: syncpipe exited (code %d); stderr:\n%s", what, p.code, tail(p.output(), 4<<10))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s; stderr:\n%s", what, d, tail(p.output(), 4<<10))
		}
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

// health reads /healthz: its status code and body ("" when it does not
// answer within 10 s).
func health(addr string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitHealth polls /healthz (within d) until cond accepts its answer.
func waitHealth(t *testing.T, p *badProc, addr string, d time.Duration, what string, cond func(code int, body string) bool) (int, string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		p.running(t)
		code, body := health(addr)
		if cond(code, body) {
			return code, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: no %s within %s (last: %d %s); stderr:\n%s", what, d, code, body, tail(p.output(), 4<<10))
		}
		time.Sleep(50 * time.Millisecond)
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

// cutProxy forwards TCP connections to a server until cut, which closes
// every connection and the listener: the server becomes unreachable.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(p.cutOff)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				c.Close()
				s.Close()
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// via returns uri with its host replaced by the proxy's.
func (p *cutProxy) via(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
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
		// The reload is asynchronous: wait until a wrong password fails.
		for {
			wc, err := pgx.Connect(ctx, r.uri("replica_source", "wrong"))
			if err != nil && strings.Contains(err.Error(), "28P01") {
				break
			}
			if wc != nil {
				wc.Close(ctx)
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("password authentication never took effect: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := execAll(ctx, r.uri("replica_source", replicaPassword), itemsSQL...); err != nil {
			return nil, err
		}
		return r, nil
	}
}
