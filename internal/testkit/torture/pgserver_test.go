package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
)

// pgServer is a PostgreSQL server of the harness's own (the source or
// storage lives on it), so that a trial can restart it: pgcluster starts it; a restart
// shuts the postmaster down (fast, or immediate — a crash, losing what
// synchronous_commit = off had not written yet) and starts a new one on
// the same data directory and port, as a child of this process.
type pgServer struct {
	c    *pgcluster.Cluster
	data string
	cred *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd     // the postmaster started by a restart (nil: pgcluster's)
	exited chan struct{} // closed when cmd has exited

	stopTook time.Duration // how long the last restart's shutdown took
}

// startServer starts a server of its own for role ("source" or
// "storage", for messages).
func startServer(ctx context.Context, t *testing.T, role string) *pgServer {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	// A parent of its own: pgcluster.Start, in any process, removes the
	// cluster dirs in its parent that have no running postmaster — as this
	// one has none while a restart keeps it down.
	parent, err := os.MkdirTemp("", "syncpipe-torture-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: parent})
	if err != nil {
		_ = os.RemoveAll(parent)
		t.Fatalf("start the %s server: %v", role, err)
	}
	s := &pgServer{c: c, data: filepath.Join(c.Dir(), "data")}
	t.Cleanup(func() {
		s.stop()
		_ = os.RemoveAll(parent)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres") // pgcluster made sure it exists
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	return s
}

// URI of database db as the superuser.
func (s *pgServer) URI(db string) string { return s.c.URI(db) }

func (s *pgServer) createDB(ctx context.Context, name string) error {
	return s.c.CreateDatabase(ctx, name)
}

// pid reads the running postmaster's pid from its pid file.
func (s *pgServer) pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// restart stops the server (immediate: SIGQUIT, a crash; else SIGINT, a
// fast shutdown), keeps it down for down, and starts it again, returning
// once it accepts connections.
func (s *pgServer) restart(ctx context.Context, immediate bool, down time.Duration) error {
	pid, err := s.pid()
	if err != nil {
		return fmt.Errorf("postmaster pid: %w", err)
	}
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	signalled := time.Now()
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal the postmaster: %w", err)
	}
	// The postmaster removes its pid file as it exits.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(s.data, "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the postmaster (pid %d) did not stop in 30 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.mu.Lock()
	old := s.exited
	s.mu.Unlock()
	if old != nil {
		<-old
	}
	s.stopTook = time.Since(signalled)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	logf, err := os.OpenFile(filepath.Join(s.c.Dir(), "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(s.c.BinDir(), "postgres"), "-D", s.data)
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, s.c.Dir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline = time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.URI("postgres"))
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited while starting; see %s", filepath.Join(s.c.Dir(), "postgres.log"))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready 60 s after the restart: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// stop ends the server, whichever postmaster runs, and removes it.
func (s *pgServer) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGQUIT)
			<-exited
		}
	}
	_ = s.c.Stop()
}
