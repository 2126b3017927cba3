package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one running syncpipe process.
type Proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, after exited

	mu   sync.Mutex
	logs bytes.Buffer // the process's stderr
	race bool         // the race detector reported a race in the process
}

// raceReport starts what a -race binary writes to stderr when it finds a
// data race. The binary goes on running (and a SIGKILLed one never exits
// with the detector's status 66), so the harness reads its stderr for it.
const raceReport = "WARNING: DATA RACE"

// ProcConfig says how to start a Proc.
type ProcConfig struct {
	// Binary is the program to run; the syncpipe binary (Binary) when
	// empty, or one BinaryOf built.
	Binary string
	Args   []string  // the program's arguments, e.g. run --config F
	Env    []string  // added to the test's environment
	Dir    string    // working directory; the test's when empty
	Stdout io.Writer // the child's stdout; discarded when nil
	// OnLine, when not nil, gets each line the child writes to stderr
	// (its logs), as it comes.
	OnLine func(line []byte)
}

// Start runs the syncpipe binary (or c.Binary) with c.Args as a child
// process. The child
// is killed when the test ends if it still runs; a data race it reported
// fails the test; when the test failed, the end of its logs is logged.
func Start(t testing.TB, c ProcConfig) *Proc {
	t.Helper()
	bin := c.Binary
	if bin == "" {
		bin = Binary(t)
	}
	cmd := exec.Command(bin, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	cmd.Stdout = c.Stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start syncpipe %s: %v", strings.Join(c.Args, " "), err)
	}
	p := &Proc{t: t, cmd: cmd, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			if c.OnLine != nil {
				c.OnLine(sc.Bytes())
			}
			p.mu.Lock()
			p.race = p.race || bytes.HasPrefix(sc.Bytes(), []byte(raceReport))
			p.logs.Write(sc.Bytes())
			p.logs.WriteByte('\n')
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	// At the test's end the child is SIGKILLed, not stopped: no test
	// depends on a clean shutdown it did not ask for (the tests of
	// stopping call Stop), and a kill does not wait out shutdown timeouts.
	// Env's cleanup, registered earlier, runs after this one.
	t.Cleanup(func() {
		p.Kill()
		p.mu.Lock()
		race := p.race
		p.mu.Unlock()
		if race {
			logs := p.Logs()
			logs = logs[strings.Index(logs, raceReport):]
			t.Errorf("syncpipe %s: the race detector reported a data race:\n%s", strings.Join(c.Args, " "), logs[:min(len(logs), 16<<10)])
		}
		if t.Failed() {
			t.Logf("syncpipe %s: exit %v; logs (last 8 KiB):\n%s", strings.Join(c.Args, " "), p.err, p.Tail(8<<10))
		}
	})
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// Kill SIGKILLs the process (no shutdown path runs) and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop ends the process with SIGTERM, SIGKILL after 30 s, and returns its
// exit error (nil for exit status 0).
func (p *Proc) Stop() error {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Errorf("syncpipe did not exit 30 s after SIGTERM; killed")
		p.Kill()
	}
	return p.err
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error (nil for status 0); valid after Exited.
func (p *Proc) Err() error { return p.err }

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Wait waits for the process to exit, at most until ctx ends, and returns
// its exit code (-1 when killed by a signal or still running).
func (p *Proc) Wait(ctx context.Context) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.t.Fatalf("syncpipe still runs: %v", ctx.Err())
	}
	return exitCode(p.err)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		return -1
	}
}

// Logs is everything the process logged so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Tail is the last n bytes of the process's logs.
func (p *Proc) Tail(n int) string {
	s := p.Logs()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// Count returns how many of the process's log lines contain s.
func (p *Proc) Count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Count(p.logs.Bytes(), []byte(s))
}

// Logged reports whether a log line contains s.
func (p *Proc) Logged(s string) bool { return p.Count(s) > 0 }

// WaitLogged waits until a log line contains s, failing when ctx ends or
// the process exits first.
func (p *Proc) WaitLogged(ctx context.Context, s string) {
	p.t.Helper()
	Poll(p.t, ctx, p, "a log line with "+s, func() bool { return p.Logged(s) })
}

// Poll checks cond every 20 ms until it holds, failing when ctx ends or
// p (when not nil) exits first.
func Poll(t testing.TB, ctx context.Context, p *Proc, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		var exited <-chan struct{}
		if p != nil {
			exited = p.exited
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-exited:
			if cond() {
				return
			}
			t.Fatalf("waiting for %s: syncpipe exited: %v", what, p.err)
		case <-tick.C:
		}
	}
}

// Run runs the syncpipe binary with args until it exits (failing the test
// if it still runs when ctx ends) and returns its exit code and output.
func Run(t testing.TB, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return RunWith(t, ctx, ProcConfig{Args: args})
}

// RunWith is Run with a ProcConfig (c.Stdout and c.OnLine are ignored).
func RunWith(t testing.TB, ctx context.Context, c ProcConfig) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	bin := c.Binary
	if bin == "" {
		bin = Binary(t)
	}
	cmd := exec.CommandContext(ctx, bin, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("syncpipe %s did not exit: %v\nstderr:\n%s", strings.Join(c.Args, " "), ctx.Err(), errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("syncpipe %s: %v", strings.Join(c.Args, " "), err)
	}
	return exitCode(err), out.String(), errb.String()
}
