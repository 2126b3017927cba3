// Package pgcluster starts and stops a throwaway PostgreSQL cluster from the
// machine's server binaries. The test harness (internal/testkit/pgtest), the demo and
// the benchmarks all use it, so a developer needs nothing but the PostgreSQL
// server package installed.
//
// The cluster is initialised with initdb in a fresh temporary directory and
// the postmaster runs as a child process of the caller, listening only on
// 127.0.0.1 with trust authentication and wal_level=logical. When the caller
// runs as root the server runs as the "postgres" system user (PostgreSQL
// refuses to run as root). The child gets a parent-death signal, so a test
// binary that is killed does not leave a server behind.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// InstallHint is the one-line fix printed when no server binaries are found.
const InstallHint = "PostgreSQL server binaries (initdb, postgres) not found: install them with `apt-get install -y postgresql` (or set PATH / SYNCPIPE_PG_BINDIR to their directory)"

// ErrNoBinaries reports that no PostgreSQL server binaries could be found.
var ErrNoBinaries = errors.New(InstallHint)

// Options configures a cluster. The zero value is a usable default.
type Options struct {
	// Dir is the parent directory for the cluster's temp dir (os.TempDir if empty).
	Dir string
	// Port to listen on; 0 picks a free port.
	Port int
	// Durable keeps fsync and full_page_writes on. Tests leave it off for
	// speed; benchmarks that measure write cost turn it on.
	Durable bool
	// Settings are extra postgresql.conf settings, applied last.
	Settings map[string]string
	// Logger receives lifecycle messages; nil discards them.
	Logger *slog.Logger
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	dir    string // temp dir holding data/ and the log
	bindir string
	port   int
	super  string // superuser role name
	cmd    *exec.Cmd
	exited chan struct{}
	log    *slog.Logger

	stopOnce sync.Once
	stopErr  error
}

// BinDir finds the directory holding initdb and postgres: SYNCPIPE_PG_BINDIR,
// then `pg_config --bindir`, then the newest /usr/lib/postgresql/*/bin, then PATH.
func BinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("SYNCPIPE_PG_BINDIR"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("SYNCPIPE_PG_BINDIR=%s holds no initdb/postgres: %w", d, ErrNoBinaries)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

// Start initialises and starts a new cluster. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	removeStale(opts.Dir, log)
	dir, err := os.MkdirTemp(opts.Dir, tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	c := &Cluster{dir: dir, bindir: bindir, super: "postgres", log: log, exited: make(chan struct{})}
	if err := c.start(ctx, opts, cred); err != nil {
		c.kill()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	log.Info("postgres started", "dir", dir, "port", c.port, "bindir", bindir)
	return c, nil
}

const tempPrefix = "syncpipe-pg-"

func (c *Cluster) start(ctx context.Context, opts Options, cred *syscall.Credential) error {
	data := filepath.Join(c.dir, "data")
	if cred != nil {
		if err := os.Chown(c.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("chown cluster dir to the postgres user: %w", err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(c.bindir, "initdb"),
		"-D", data, "-U", c.super, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = c.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 5))
	}
	port := opts.Port
	for attempt := 0; ; attempt++ {
		if opts.Port == 0 {
			p, err := FreePort()
			if err != nil {
				return err
			}
			port = p
		}
		if err := writeConf(data, port, opts); err != nil {
			return err
		}
		c.port = port
		err := c.launch(ctx, data, cred)
		if err == nil {
			err = c.waitReady(ctx, port)
		}
		if err == nil {
			return nil
		}
		// A free port can be taken between our probe and the server's bind;
		// only then (server gone) is another port worth a try.
		exited := c.cmd == nil
		if c.cmd != nil {
			select {
			case <-c.exited:
				exited = true
			default:
			}
		}
		if !exited || opts.Port != 0 || attempt >= 3 || ctx.Err() != nil {
			return err
		}
	}
}

func writeConf(data string, port int, opts Options) error {
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": "''",
		"wal_level":               "logical",
		"max_wal_senders":         "32",
		"max_replication_slots":   "32",
		"max_connections":         "200",
		"shared_buffers":          "256MB",
		"max_wal_size":            "4GB",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
	}
	if !opts.Durable {
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
		settings["synchronous_commit"] = "off"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by syncpipe pgcluster\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	return os.WriteFile(filepath.Join(data, "postgresql.auto.conf"), []byte(b.String()), 0o644)
}

// launch starts the postmaster and returns once it is running or has died.
func (c *Cluster) launch(ctx context.Context, data string, cred *syscall.Credential) error {
	logPath := filepath.Join(c.dir, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer logf.Close()
	if cred != nil {
		_ = os.Chown(logPath, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(filepath.Join(c.bindir, "postgres"), "-D", data)
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, c.dir
	// Pdeathsig is applied after the credential switch, so it survives it:
	// if our process dies, the server gets a fast shutdown.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd = cmd
	c.exited = make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); close(exited) }(c.exited)
	return nil
}

// waitReady polls until the server accepts connections. Polling is the only
// readiness signal PostgreSQL gives (pg_ctl -w does the same).
func (c *Cluster) waitReady(ctx context.Context, port int) error {
	deadline := time.Now().Add(60 * time.Second)
	backoff := 10 * time.Millisecond
	for {
		conn, err := pgx.Connect(ctx, c.URI("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-c.exited:
			logb, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
			return fmt.Errorf("postgres exited during start-up on port %d: %s", port, lastLines(string(logb), 5))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// URI returns a connection string for database db as the superuser.
func (c *Cluster) URI(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", c.super, c.port, db)
}

// Port is the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster's temp directory (removed by Stop).
func (c *Cluster) Dir() string { return c.dir }

// BinDir is the directory of the server binaries the cluster runs.
func (c *Cluster) BinDir() string { return c.bindir }

// CreateDatabase creates database name (owned by the superuser).
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URI("postgres"))
	if err != nil {
		return fmt.Errorf("connect to create database %q: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %q: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name, ending its sessions (and any
// autovacuum of it) first.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return c.exec(ctx, "drop database "+name, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// Checkpoint runs CHECKPOINT: what earlier work left in shared buffers is
// written out now, not during whatever is measured next.
func (c *Cluster) Checkpoint(ctx context.Context) error {
	return c.exec(ctx, "checkpoint", "CHECKPOINT")
}

// exec runs one statement as the superuser in the postgres database.
func (c *Cluster) exec(ctx context.Context, what, sql string) error {
	conn, err := pgx.Connect(ctx, c.URI("postgres"))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", what, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown, then immediate after 20s) and
// removes its directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if c.cmd != nil && c.cmd.Process != nil {
			_ = c.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-c.exited:
			case <-time.After(20 * time.Second):
				c.kill()
			}
		}
		c.stopErr = os.RemoveAll(c.dir)
		c.log.Info("postgres stopped", "dir", c.dir)
	})
	return c.stopErr
}

func (c *Cluster) kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		// The postmaster leads its own process group; SIGQUIT to the group
		// is an immediate shutdown that also reaches its backends.
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGQUIT)
		<-c.exited
	}
}

// serverCredential returns the identity the server must run as: nil for a
// non-root caller, the "postgres" system user for root (created if missing).
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if out, err2 := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres").CombinedOutput(); err2 != nil {
			return nil, fmt.Errorf("running as root and no postgres user exists; creating one failed: %v: %s", err2, out)
		}
		if u, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("look up postgres user: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// removeStale deletes cluster dirs left behind by processes that were killed
// before they could clean up (their postmaster is gone).
func removeStale(parent string, log *slog.Logger) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(parent, tempPrefix+"*"))
	for _, d := range dirs {
		pidb, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid"))
		if err == nil {
			pid, _ := strconv.Atoi(strings.SplitN(string(pidb), "\n", 2)[0])
			if pid > 0 && syscall.Kill(pid, 0) == nil {
				continue // still running
			}
		}
		st, err := os.Stat(d)
		if err != nil || time.Since(st.ModTime()) < time.Minute {
			continue // possibly another process still initialising it
		}
		if os.RemoveAll(d) == nil {
			log.Debug("removed stale cluster dir", "dir", d)
		}
	}
}

// FreePort asks the kernel for a loopback TCP port nobody listens on. The
// port is free when it returns; whoever binds it next should do so soon.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
