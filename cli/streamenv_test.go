package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/pgtest"
)

// streamEnv runs `syncpipe run` children against a source and an empty
// storage database of the test cluster, for the streaming robustness
// tests: large transactions, schema changes, lost slots, publication
// events, forced failures.
type streamEnv struct {
	t       *testing.T
	dir     string
	srcURI  string
	src     *pgx.Conn
	storage *pgxpool.Pool
	config  string
	api     string // host:port of the sync API
	env     []string

	mu    sync.Mutex
	logs  bytes.Buffer
	child *child
}

// child is one running syncpipe process.
type child struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, after exited

	mu   sync.Mutex
	logs bytes.Buffer // this process's stderr (e.logs has every child's)
}

// count returns how many of this child's log lines contain s.
func (c *child) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Count(c.logs.Bytes(), []byte(s))
}

// envOptions shape a streamEnv's config.
type envOptions struct {
	rules string
	extra string   // more YAML under replication:
	api   string   // more YAML under api:
	env   []string // extra environment of the children
}

const testSecret = "a-long-random-secret-for-the-stream-tests"

func newStreamEnv(t *testing.T, opt envOptions) *streamEnv {
	t.Helper()
	ctx := context.Background()
	e := &streamEnv{t: t, dir: t.TempDir(), env: opt.env}
	e.srcURI = pgtest.NewDB(t)
	storage := pgtest.NewDB(t)
	e.src = pgtest.Connect(t, e.srcURI)
	if err := os.WriteFile(filepath.Join(e.dir, "rules.yaml"), []byte(opt.rules), 0o644); err != nil {
		t.Fatal(err)
	}
	e.api = freeAddr(t)
	e.config = filepath.Join(e.dir, "syncpipe.yaml")
	cfg := fmt.Sprintf(`source: {uri: %q}
storage: {uri: %q}
sync_rules: {path: rules.yaml}
replication:
  workers_per_process: 2
  stream: {batch_max_wait: 20ms, schema_check_interval: 1s}
%s
api:
  listen: %s
  auth: {audience: [syncpipe], hs256_secrets: [%q]}
  shutdown_timeout: 2s
%s
telemetry: {metrics_listen: ""}
log: {level: info, format: json}
`, e.srcURI, storage, indentYAML(opt.extra), e.api, testSecret, indentYAML(opt.api))
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.storage, err = pgxpool.New(ctx, storage); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("groups:\n%s", e.dumpGroups())
		}
		e.stop()
		e.storage.Close()
		if t.Failed() {
			t.Logf("syncpipe logs (last 8 KiB):\n%s", e.tailLogs(8<<10))
		}
	})
	return e
}

func indentYAML(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs `syncpipe run --config F` (role all) as a child process.
func (e *streamEnv) start() *child { return e.startWith(nil) }

// startWith starts `syncpipe run` with more flags, its stdout going to
// stdout (discarded when nil).
func (e *streamEnv) startWith(stdout io.Writer, flags ...string) *child {
	e.t.Helper()
	c := startChild(e.t, stdout, e.env, e.logLine, append([]string{"run", "--config", e.config}, flags...)...)
	e.child = c
	return c
}

// logLine keeps a line any child logged.
func (e *streamEnv) logLine(line []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.logs.Write(line)
	e.logs.WriteByte('\n')
}

// startChild runs `syncpipe args…` as a child process with env added to
// the test's, its stdout going to stdout (discarded when nil; an *os.File
// is the child's own stdout) and each line of its stderr kept in the
// child's logs and passed to also (when not nil).
func startChild(t *testing.T, stdout io.Writer, env []string, also func(line []byte), args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), childEnv+"="+strings.Join(args, "\x1f"))
	cmd.Stdout = stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if also != nil {
				also(sc.Bytes())
			}
			c.mu.Lock()
			c.logs.Write(sc.Bytes())
			c.logs.WriteByte('\n')
			c.mu.Unlock()
		}
	}()
	go func() {
		<-done
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c
}

// kill SIGKILLs the child: no shutdown path runs.
func (e *streamEnv) kill() {
	if c := e.child; c != nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.exited
		e.child = nil
	}
}

// stop ends the child with SIGTERM (SIGKILL after 30 s).
func (e *streamEnv) stop() {
	c := e.child
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.exited
	}
	e.child = nil
}

// alive fails the test if the child has exited.
func (e *streamEnv) alive() {
	e.t.Helper()
	if e.child == nil {
		e.t.Fatal("no syncpipe process running")
	}
	select {
	case <-e.child.exited:
		e.t.Fatalf("syncpipe exited: %v", e.child.err)
	default:
	}
}

func (e *streamEnv) tailLogs(n int) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.logs.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// logged reports whether a log line contains s.
func (e *streamEnv) logged(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bytes.Contains(e.logs.Bytes(), []byte(s))
}

func (e *streamEnv) exec(ctx context.Context, q string, args ...any) {
	e.t.Helper()
	if _, err := e.src.Exec(ctx, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

// sourceLSN is the source's current WAL insert position.
func (e *streamEnv) sourceLSN(ctx context.Context) string {
	e.t.Helper()
	var lsn string
	if err := e.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// waitCaughtUp waits until an active group published a checkpoint at or
// past the source's current position, failing if the child exits.
func (e *streamEnv) waitCaughtUp(ctx context.Context) {
	e.t.Helper()
	target := e.sourceLSN(ctx)
	e.waitFor(ctx, "a checkpoint past "+target, func() bool {
		var reached bool
		err := e.storage.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false)
			FROM syncpipe.groups WHERE state = 'ACTIVE'`, target).Scan(&reached)
		return err == nil && reached
	})
}

// waitFor polls cond every 20 ms until it holds, failing when ctx ends or
// the child exits.
func (e *streamEnv) waitFor(ctx context.Context, what string, cond func() bool) {
	e.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		var exited <-chan struct{}
		if e.child != nil {
			exited = e.child.exited
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-exited:
			e.t.Fatalf("waiting for %s: syncpipe exited: %v", what, e.child.err)
		case <-tick.C:
		}
	}
}

// converge waits until storage holds want() (computed from the source
// each time), failing with the last difference after timeout or when the
// child exits.
func (e *streamEnv) converge(ctx context.Context, timeout time.Duration, want func() bucketcheck.State) {
	e.t.Helper()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := bucketcheck.Stored(ctx, e.storage, "syncpipe")
		if err == nil {
			err = bucketcheck.Diff(got, want())
		}
		if err == nil {
			return
		}
		last = err
		select {
		case <-cctx.Done():
			e.t.Fatalf("storage does not equal the source after %s: %v", timeout, last)
		case <-tick.C:
		}
		if e.child != nil {
			select {
			case <-e.child.exited:
				e.t.Fatalf("syncpipe exited: %v (storage: %v)", e.child.err, last)
			default:
			}
		}
	}
}

// todos returns what the todo rules of group put in storage, computed
// from the source each time it is called (bucketcheck.ExpectedTodosGroup).
func (e *streamEnv) todos(ctx context.Context, group int) func() bucketcheck.State {
	return func() bucketcheck.State {
		st, err := bucketcheck.ExpectedTodosGroup(ctx, e.src, group)
		if err != nil {
			e.t.Fatal(err)
		}
		return st
	}
}

// token mints a client JWT through `syncpipe token`.
func (e *streamEnv) token(sub string) string {
	e.t.Helper()
	code, stdout, stderr := runCLI(e.t, "token", "--config", e.config, "--sub", sub)
	if code != 0 {
		e.t.Fatalf("syncpipe token: exit %d: %s", code, stderr)
	}
	return strings.TrimSpace(stdout)
}

// groups returns the groups' ids and states, oldest first.
func (e *streamEnv) groups(ctx context.Context) (ids []int, states []string) {
	e.t.Helper()
	rows, err := e.storage.Query(ctx, "SELECT id, state FROM syncpipe.groups ORDER BY id")
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			e.t.Fatal(err)
		}
		ids, states = append(ids, id), append(states, st)
	}
	return ids, states
}

// activeGroup is the id of the ACTIVE group (0 if none).
func (e *streamEnv) activeGroup(ctx context.Context) int {
	var id int
	_ = e.storage.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM syncpipe.groups WHERE state = 'ACTIVE'").Scan(&id)
	return id
}

// dumpGroups describes the stored groups, for failure messages.
func (e *streamEnv) dumpGroups() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := e.storage.Query(ctx, `SELECT format('%s %s checkpoint=%s@%s stream=%s txn=%s/%s no_before=%s error=%s',
		id, state, last_checkpoint, last_checkpoint_lsn, stream_lsn, stream_txn_lsn, stream_txn_changes, no_checkpoint_before, last_error)
		FROM syncpipe.groups ORDER BY id`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		_ = rows.Scan(&line)
		b.WriteString(line + "\n")
	}
	return b.String()
}
