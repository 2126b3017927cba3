package benchmarks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/gitbuild"
)

// The syncpipe side of a scenario runs as a child process (`syncpipe run`),
// so its peak RSS (SPEC §9 P6) is measured apart from the harness, which
// holds dumped storage rows for the baselines, and so the measured process
// is exactly what an operator runs.

// BuildSyncpipe compiles ./cmd/syncpipe into dir and returns the binary's
// path. race builds it with the race detector, so a test binary built with
// -race reuses the packages already in the build cache.
func BuildSyncpipe(ctx context.Context, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "syncpipe")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	// The import path works from any directory inside the module (go run
	// from the root, go test from benchmarks/).
	args = append(args, "github.com/syncpipe/syncpipe/cmd/syncpipe")
	cmd := exec.CommandContext(ctx, gitbuild.GoTool(), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build syncpipe: %w\n%s", err, out)
	}
	return bin, nil
}

// ChildOptions configures one `syncpipe run` child process.
type ChildOptions struct {
	// Binary is the syncpipe executable (see BuildSyncpipe).
	Binary string
	// Dir receives the generated config file.
	Dir string
	// Config is the YAML configuration. Its log format must be json: the
	// child's log lines are how the harness follows it.
	Config string
	// Role is passed as --role (default replication:snapshot).
	Role string
	// Stdout receives the child's standard output, where the stdout trace
	// exporter writes spans; nil discards it.
	Stdout io.Writer
	// CPUProfileDir, if set, receives the child's Go CPU profile, named
	// after its config file and role.
	CPUProfileDir string
}

// Child is a running `syncpipe run` process.
type Child struct {
	cmd     *exec.Cmd
	config  string // the config file's path
	started time.Time

	mu      sync.Mutex
	seen    map[string]time.Time // first time each log message was read
	changed chan struct{}        // closed and replaced when seen grows
	summary string               // the stage-time summary logged at exit
	tail    []string             // last log lines, for error reports
	logDone chan struct{}        // the log reader reached EOF

	exited  chan struct{}
	waitErr error
	hwm     atomic.Int64 // highest VmHWM seen, bytes
}

// ChildStats is what a finished child leaves behind.
type ChildStats struct {
	// PeakRSS is the child's peak resident set size in bytes: its VmHWM,
	// read until it exits. Not rusage's ru_maxrss: os/exec starts children
	// with vfork semantics, and exec records the high-water mark of the
	// mm it replaces — the harness's own, which holds gigabytes of dumped
	// rows — so ru_maxrss would report the harness, not syncpipe.
	PeakRSS int64
	// User and System are the child's CPU times.
	User, System time.Duration
	// Stages is the stage-time summary the child logged at exit (empty if
	// no pipeline ran).
	Stages Breakdown
}

// StartChild writes the config and starts `syncpipe run --config … --role …`.
func StartChild(ctx context.Context, opt ChildOptions) (*Child, error) {
	if opt.Role == "" {
		opt.Role = "replication:snapshot"
	}
	f, err := os.CreateTemp(opt.Dir, "syncpipe-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("write child config: %w", err)
	}
	_, err = f.WriteString(opt.Config)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write child config: %w", err)
	}
	// Not CommandContext, whose SIGKILL would lose the summary logged on
	// the way out: Stop ends the child with SIGTERM.
	args := []string{"run", "--config", f.Name(), "--role", opt.Role}
	if opt.CPUProfileDir != "" {
		name := strings.TrimSuffix(filepath.Base(f.Name()), ".yaml") + "-" + strings.ReplaceAll(opt.Role, ":", "-") + ".pprof"
		args = append(args, "--cpu-profile", filepath.Join(opt.CPUProfileDir, name))
	}
	cmd := exec.Command(opt.Binary, args...)
	cmd.Stdout = opt.Stdout
	// A harness that dies must not leave syncpipe running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start syncpipe: %w", err)
	}
	c := &Child{cmd: cmd, config: f.Name(), seen: map[string]time.Time{}, changed: make(chan struct{}),
		logDone: make(chan struct{}), exited: make(chan struct{})}
	c.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start syncpipe: %w", err)
	}
	go c.readLog(stderr)
	go c.watchRSS()
	go func() {
		<-c.logDone // Wait closes the pipe: read it to the end first
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// watchRSS samples the child's VmHWM until it exits. The mark only grows,
// so the last sample before the exit is the peak up to then; the sampling
// interval only bounds how much of the shutdown path can be missed.
func (c *Child) watchRSS() {
	path := fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if n := vmHWM(path); n > c.hwm.Load() {
			c.hwm.Store(n)
		}
		select {
		case <-c.exited:
			return
		case <-tick.C:
		}
	}
}

// vmHWM reads the VmHWM line of a /proc status file, in bytes (0 if the
// process is gone or a zombie, whose memory is already released).
func vmHWM(path string) int64 { return procStatusBytes(path, "VmHWM:") }

// procStatusBytes reads a kB line (VmHWM:, VmRSS:) of a /proc status
// file, in bytes (0 if the process is gone).
func procStatusBytes(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// RSS is the child's resident set size now, in bytes.
func (c *Child) RSS() int64 {
	return procStatusBytes(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid), "VmRSS:")
}

// Binary is the child's executable.
func (c *Child) Binary() string { return c.cmd.Path }

// ConfigPath is the child's config file, for other syncpipe commands
// (compact, status) to run against the same source and storage.
func (c *Child) ConfigPath() string { return c.config }

// Started is when the process was started: scenarios time from it.
func (c *Child) Started() time.Time { return c.started }

// readLog follows the child's JSON log lines.
func (c *Child) readLog(r io.Reader) {
	defer close(c.logDone)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		now := time.Now()
		line := sc.Text()
		var rec struct {
			Msg string `json:"msg"`
		}
		msg := line
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			msg = rec.Msg
		}
		c.mu.Lock()
		if strings.HasPrefix(msg, summaryMsg) {
			c.summary = strings.TrimPrefix(msg, summaryMsg)
		}
		if _, ok := c.seen[msg]; !ok {
			c.seen[msg] = now
			close(c.changed)
			c.changed = make(chan struct{})
		}
		c.tail = append(c.tail, line)
		if len(c.tail) > 20 {
			c.tail = c.tail[1:]
		}
		c.mu.Unlock()
	}
}

// summaryMsg prefixes the stage-time summary `syncpipe run` logs at exit.
const summaryMsg = "stage-time summary\n"

// WaitFor blocks until the child logs msg and returns when it was read.
// It fails if the child exits first, with the child's last log lines.
func (c *Child) WaitFor(ctx context.Context, msg string) (time.Time, error) {
	for {
		c.mu.Lock()
		t, ok := c.seen[msg]
		changed := c.changed
		c.mu.Unlock()
		if ok {
			return t, nil
		}
		select {
		case <-changed:
		case <-c.exited:
			return time.Time{}, fmt.Errorf("syncpipe exited (%v) before logging %q:\n%s", c.waitErr, msg, c.Tail())
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for syncpipe to log %q: %w", msg, ctx.Err())
		}
	}
}

// Seen reports when the child logged msg, if it has.
func (c *Child) Seen(msg string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.seen[msg]
	return t, ok
}

// Tail returns the child's last log lines.
func (c *Child) Tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// CPU is the CPU time (user + system, all threads) the child has used so
// far, read from /proc/<pid>/stat: a sample at a moment of the harness's
// choosing, where the rusage Stop returns covers the child's whole life.
// Zero once the child has exited.
func (c *Child) CPU() time.Duration {
	f := procStat(c.cmd.Process.Pid)
	if len(f) < 13 {
		return 0
	}
	var ticks uint64
	for _, v := range f[11:13] { // utime, stime
		t, _ := strconv.ParseUint(v, 10, 64)
		ticks += t
	}
	return time.Duration(ticks) * clockTick
}

// Kill ends the child with SIGKILL — no shutdown path, no stage summary,
// its storage sessions cut — waits for the exit and returns its resource
// usage.
func (c *Child) Kill() ChildStats {
	_ = c.cmd.Process.Kill()
	<-c.exited
	st := ChildStats{PeakRSS: c.hwm.Load()}
	if ps := c.cmd.ProcessState; ps != nil {
		st.User, st.System = ps.UserTime(), ps.SystemTime()
	}
	return st
}

// Stop sends SIGTERM (the graceful shutdown that logs the stage summary),
// waits for the exit (SIGKILL after a minute) and returns the child's
// resource usage and summary.
func (c *Child) Stop() (ChildStats, error) {
	if n := vmHWM(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid)); n > c.hwm.Load() {
		c.hwm.Store(n)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	st := ChildStats{PeakRSS: c.hwm.Load()}
	if ps := c.cmd.ProcessState; ps != nil {
		st.User, st.System = ps.UserTime(), ps.SystemTime()
	}
	c.mu.Lock()
	text := c.summary
	c.mu.Unlock()
	if text != "" {
		b, err := ParseBreakdown(text)
		if err != nil {
			return st, fmt.Errorf("read syncpipe's stage summary: %w", err)
		}
		st.Stages = b
	}
	var ee *exec.ExitError
	if c.waitErr != nil && !errors.As(c.waitErr, &ee) {
		return st, fmt.Errorf("wait for syncpipe: %w", c.waitErr)
	}
	if c.cmd.ProcessState != nil && !c.cmd.ProcessState.Success() {
		return st, fmt.Errorf("syncpipe exited with %v:\n%s", c.cmd.ProcessState, c.Tail())
	}
	return st, nil
}
