package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// Secret is the HS256 secret of an Env's config; Token signs with it.
const Secret = "a-long-random-secret-for-the-stream-tests"

// Options shape an Env's config and data.
type Options struct {
	Rules       string      // the sync rules; todos.Rules when empty
	Replication string      // more YAML under replication:
	API         string      // more YAML under api:
	Top         string      // more top-level YAML (e.g. pipelines:)
	Env         []string    // extra environment of every child
	Data        *todos.Size // todo data loaded into the source, when not nil
	// NoStorage leaves out the storage database and the storage and api
	// sections: the config's pipelines (Top) must all write to sinks
	// other than bucketstore, and keep their state in StateDir.
	NoStorage bool
}

// StateDir is the state_dir of an Env with Options.NoStorage, relative
// to Env.Dir.
const StateDir = "state"

// Env is a source database, an empty storage database and a config for
// `syncpipe run` against them, with the children started on it.
type Env struct {
	T          testing.TB
	Dir        string        // the test's directory: config, rules
	SourceURI  string        // the source database
	StorageURI string        // the storage database ("" with NoStorage)
	Src        *pgx.Conn     // a connection to the source
	Storage    *pgxpool.Pool // connections to storage (nil with NoStorage)
	Config     string        // path of the config file
	API        string        // host:port of the sync API
	Metrics    string        // host:port of the metrics listener ("" when off)
	env        []string

	mu    sync.Mutex
	logs  bytes.Buffer // every child's logs
	procs []*Proc
}

// New creates an Env for t. Its children are SIGKILLed when the test ends
// (each by its own Proc cleanup), and when the test failed the groups and
// the end of the logs are logged.
func New(t testing.TB, opt Options) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &Env{T: t, Dir: t.TempDir(), env: opt.Env}
	e.SourceURI = pgtest.NewDB(t)
	if !opt.NoStorage {
		e.StorageURI = pgtest.NewDB(t)
	}
	e.Src = pgtest.Connect(t, e.SourceURI)
	if opt.Data != nil {
		if _, err := todos.Load(ctx, e.Src, *opt.Data); err != nil {
			t.Fatalf("load todos: %v", err)
		}
	}
	rules := opt.Rules
	if rules == "" {
		rules = todos.Rules
	}
	e.WriteFile("rules.yaml", rules)
	e.Config = filepath.Join(e.Dir, "syncpipe.yaml")
	if opt.NoStorage {
		e.WriteFile("syncpipe.yaml", fmt.Sprintf(`source: {uri: %q}
state_dir: %s
sync_rules: {path: rules.yaml}
replication:
  workers_per_process: 2
  stream: {batch_max_wait: 20ms, schema_check_interval: 1s}
%s
telemetry: {metrics_listen: ""}
log: {level: info, format: json}
%s
`, e.SourceURI, StateDir, Indent(opt.Replication), opt.Top))
	} else {
		e.API = FreeAddr(t)
		e.WriteFile("syncpipe.yaml", fmt.Sprintf(`source: {uri: %q}
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
%s
`, e.SourceURI, e.StorageURI, Indent(opt.Replication), e.API, Secret, Indent(opt.API), opt.Top))
	}
	if opt.NoStorage {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("syncpipe logs, every child (last 8 KiB):\n%s", e.TailLogs(8<<10))
			}
		})
		return e
	}
	var err error
	if e.Storage, err = pgxpool.New(ctx, e.StorageURI); err != nil {
		t.Fatal(err)
	}
	// This cleanup is registered before any child's, so it runs after
	// theirs: every child has been SIGKILLed by then (see Start). A test's
	// end is not a test of shutdown; the tests of stopping stop their
	// children themselves (Proc.Stop, StopAll).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("groups:\n%s", e.DumpGroups())
		}
		e.Storage.Close()
		if t.Failed() {
			t.Logf("syncpipe logs, every child (last 8 KiB):\n%s", e.TailLogs(8<<10))
		}
	})
	return e
}

// WriteFile writes a file of the Env's directory and returns its path.
func (e *Env) WriteFile(name, content string) string {
	e.T.Helper()
	p := filepath.Join(e.Dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.T.Fatal(err)
	}
	return p
}

// Indent indents YAML by two spaces, to nest it under a key.
func Indent(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ")
}

// Start runs `syncpipe run --config F flags…` (role all unless a flag says
// otherwise) as a child process.
func (e *Env) Start(flags ...string) *Proc {
	e.T.Helper()
	return e.StartWith(ProcConfig{Args: flags})
}

// StartRole runs `syncpipe run --config F --role role` with env added to
// the Env's environment.
func (e *Env) StartRole(role string, env ...string) *Proc {
	e.T.Helper()
	return e.StartWith(ProcConfig{Args: []string{"--role", role}, Env: env})
}

// StartWith runs `syncpipe run --config F c.Args…`; the Env's environment
// is added to c.Env and every log line is kept in the Env's logs too.
func (e *Env) StartWith(c ProcConfig) *Proc {
	e.T.Helper()
	c.Args = append([]string{"run", "--config", e.Config}, c.Args...)
	c.Env = append(append([]string(nil), e.env...), c.Env...)
	also := c.OnLine
	c.OnLine = func(line []byte) {
		e.mu.Lock()
		e.logs.Write(line)
		e.logs.WriteByte('\n')
		e.mu.Unlock()
		if also != nil {
			also(line)
		}
	}
	p := Start(e.T, c)
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p
}

// Proc is the child started last (nil before the first).
func (e *Env) Proc() *Proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.procs) == 0 {
		return nil
	}
	return e.procs[len(e.procs)-1]
}

// Kill SIGKILLs every running child.
func (e *Env) Kill() {
	for _, p := range e.running() {
		p.Kill()
	}
}

// StopAll stops every running child with SIGTERM (see Proc.Stop).
func (e *Env) StopAll() {
	for _, p := range e.running() {
		_ = p.Stop()
	}
}

func (e *Env) running() []*Proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ps []*Proc
	for _, p := range e.procs {
		if p.Running() {
			ps = append(ps, p)
		}
	}
	return ps
}

// Alive fails the test if the last child has exited.
func (e *Env) Alive() {
	e.T.Helper()
	p := e.Proc()
	if p == nil {
		e.T.Fatal("no syncpipe process running")
	}
	if !p.Running() {
		e.T.Fatalf("syncpipe exited: %v", p.Err())
	}
}

// Logged reports whether a line any child logged contains s.
func (e *Env) Logged(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bytes.Contains(e.logs.Bytes(), []byte(s))
}

// Logs is every line any child logged.
func (e *Env) Logs() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs.String()
}

// TailLogs is the last n bytes of every child's logs.
func (e *Env) TailLogs(n int) string {
	s := e.Logs()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// Exec runs SQL on the source, failing the test on error.
func (e *Env) Exec(ctx context.Context, q string, args ...any) {
	e.T.Helper()
	if _, err := e.Src.Exec(ctx, q, args...); err != nil {
		e.T.Fatalf("%s: %v", q, err)
	}
}

// Token mints a client JWT for sub through `syncpipe token`.
func (e *Env) Token(sub string) string {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := Run(e.T, ctx, "token", "--config", e.Config, "--sub", sub)
	if code != 0 {
		e.T.Fatalf("syncpipe token: exit %d: %s", code, stderr)
	}
	return strings.TrimSpace(stdout)
}
