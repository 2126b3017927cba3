package torture

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// childEnv makes the test binary act as `syncpipe` (cli.Main, exactly
// what cmd/syncpipe runs), so the trials start and kill real syncpipe
// processes without a separate build. binEnv names a built syncpipe
// binary to run instead (the soak command builds one without -race).
const (
	childEnv = "SYNCPIPE_TORTURE_CHILD_ARGS"
	binEnv   = "SYNCPIPE_TORTURE_BIN"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	pgtest.Main(m)
}

// proc is one syncpipe child process; restart replaces its command.
type proc struct {
	name   string
	role   string
	config string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	err      error
	expected bool // the harness killed or stopped it
	stopped  bool // SIGSTOPped
	lines    []string
	total    int // lines read in all
	races    int
	starts   int
}

const keepLines = 2000

func (p *proc) start() error {
	var cmd *exec.Cmd
	args := []string{"run", "--config", p.config, "--role", p.role}
	if bin := os.Getenv(binEnv); bin != "" {
		cmd = exec.Command(bin, args...)
	} else {
		cmd = exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, "\x1f"))
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.err, p.expected, p.stopped = cmd, exited, nil, false, false
	p.starts++
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.readLogs(stderr)
	}()
	go func() {
		<-done
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

func (p *proc) readLogs(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		if strings.Contains(line, "DATA RACE") {
			p.races++
		}
		p.lines = append(p.lines, line)
		p.total++
		if len(p.lines) > keepLines {
			p.lines = p.lines[len(p.lines)-keepLines:]
		}
		p.mu.Unlock()
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return -1
	}
	return p.cmd.Process.Pid
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM:
		p.expected = true
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	_ = p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the process with SIGTERM (SIGKILL after 20 s).
func (p *proc) stop() {
	p.mu.Lock()
	if p.cmd == nil {
		p.mu.Unlock()
		return
	}
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return
	default:
	}
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

// problem reports an exit the harness did not cause, or a data race.
func (p *proc) problem() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil // never started
	}
	if p.races > 0 {
		return fmt.Errorf("%s reported a data race; its log:\n%s", p.name, p.tailLocked(80))
	}
	select {
	case <-p.exited:
		if !p.expected {
			return fmt.Errorf("%s exited by itself: %v; its log:\n%s", p.name, p.err, p.tailLocked(60))
		}
	default:
	}
	return nil
}

// mark is the position of the next log line, for since.
func (p *proc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// since returns the kept log lines from mark on that contain one of subs
// (at most 30).
func (p *proc) since(mark int, subs ...string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := len(p.lines) - (p.total - mark)
	var out []string
	for _, l := range p.lines[max(0, start):] {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out[max(0, len(out)-30):], "\n")
}

func (p *proc) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tailLocked(n)
}

func (p *proc) tailLocked(n int) string {
	l := p.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
