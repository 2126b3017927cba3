package commands

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// The demo needs no exclusive resource: its cluster is in a fresh
// directory under $TMPDIR on a free port, and its sync API takes a free
// port unless --port names one (TestDemoPortAndStatusCommand picks a free
// one), so the demo tests run in parallel.

var dataDirRe = regexp.MustCompile(`\(data in ([^)]+)\)`)

// TestUnknownCommandIsUsageError: an unknown command is a usage error
// (exit 2) naming the command.
func TestUnknownCommandIsUsageError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, _, stderr := harness.Run(t, ctx, "frobnicate")
	if code != cli.ExitUsage {
		t.Fatalf("exit code %d, want %d", code, cli.ExitUsage)
	}
	if !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Fatalf("stderr = %q", stderr)
	}
}

// demoProc is `syncpipe demo` running as a child process, its stdout a
// pipe the test reads and may close, as a `| tee` that dies does.
type demoProc struct {
	*harness.Proc
	stdout *os.File // the read end of the child's stdout
	out    strings.Builder
	dir    string // the cluster's directory, from the demo's output
}

// startDemo starts `syncpipe demo --lists 2 --todos 20 flags…` and reads
// its stdout until a line contains until.
func startDemo(t *testing.T, until string, flags ...string) *demoProc {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &demoProc{stdout: r}
	d.Proc = harness.Start(t, harness.ProcConfig{
		Args:   append([]string{"demo", "--lists", "2", "--todos", "20"}, flags...),
		Stdout: w,
	})
	_ = w.Close() // the child has its own copy
	t.Cleanup(func() {
		_ = r.Close()
		// A demo a failed test left running is stopped as a user does, so
		// that it still removes its cluster's directory (harness.Start's
		// own clean-up SIGKILLs it, which would leave the directory).
		if d.Running() {
			_ = d.Stop()
		}
		if t.Failed() {
			t.Logf("demo stdout:\n%s", d.out.String())
		}
	})
	d.readUntil(t, until)
	return d
}

// readUntil reads the demo's stdout until a line contains s, within two
// minutes (initdb, a PostgreSQL start and the load under -race on 2 busy
// cores take seconds; the old minute was tight).
func (d *demoProc) readUntil(t *testing.T, s string) {
	t.Helper()
	if err := d.stdout.SetReadDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(d.stdout)
	for sc.Scan() {
		line := sc.Text()
		d.out.WriteString(line + "\n")
		if m := dataDirRe.FindStringSubmatch(line); m != nil {
			d.dir = m[1]
		}
		if strings.Contains(line, s) {
			return
		}
	}
	t.Fatalf("demo stdout ended (%v) before a line with %q", sc.Err(), s)
}

// stoppedAndCleanedUp waits (a minute at most) for the demo to exit, and
// checks it exited 0, its cluster directory is gone, and it said so on
// stderr, in one line naming the directory and why it stopped.
func (d *demoProc) stoppedAndCleanedUp(t *testing.T, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code := d.Wait(ctx); code != 0 {
		t.Fatalf("demo exited with %v, want exit code 0", d.Err())
	}
	if d.dir == "" {
		t.Fatal("the demo did not print its data dir")
	}
	if _, err := os.Stat(d.dir); !os.IsNotExist(err) {
		t.Fatalf("cluster dir %s still exists after the demo ended (stat: %v)", d.dir, err)
	}
	want := regexp.MustCompile(`(?m)^syncpipe demo: .*` + regexp.QuoteMeta(why) + `.*; PostgreSQL stopped and ` + regexp.QuoteMeta(d.dir) + ` removed$`)
	if !want.MatchString(d.Logs()) {
		t.Fatalf("stderr lacks a line matching %s", want)
	}
}

// TestDemoCleansUpWhenStdoutIsGoneAndInterrupted is `syncpipe demo | tee
// out.txt` and Ctrl-C: tee dies, the demo's next write to stdout fails,
// and the demo must still stop its cluster and remove its directory. It
// also checks what the demo printed until then.
func TestDemoCleansUpWhenStdoutIsGoneAndInterrupted(t *testing.T) {
	t.Parallel()
	d := startDemo(t, "Press Ctrl-C")
	if _, err := os.Stat(d.dir); err != nil {
		t.Fatalf("cluster dir %q not there while the demo runs: %v", d.dir, err)
	}
	if !strings.Contains(d.out.String(), "2 lists, 20 todos loaded") {
		t.Fatalf("demo did not report the load:\n%s", d.out.String())
	}
	// The demo serves Sync Streams and says how to subscribe to a list
	// of its user's.
	if !regexp.MustCompile(`"stream":"list_todos","params":\{"list_id":"[0-9a-f-]{36}"\}`).MatchString(d.out.String()) {
		t.Fatalf("demo did not print how to subscribe to one of its user's lists:\n%s", d.out.String())
	}
	_ = d.stdout.Close()
	d.Signal(os.Interrupt)
	d.stoppedAndCleanedUp(t, "interrupt")
}

// TestDemoStopsWhenStdoutIsGone is `syncpipe demo | head -3`: the reader
// goes away while the demo still prints, and the demo stops by itself and
// cleans up instead of running on with nobody to see it.
func TestDemoStopsWhenStdoutIsGone(t *testing.T) {
	t.Parallel()
	d := startDemo(t, "(data in ")
	_ = d.stdout.Close()
	d.stoppedAndCleanedUp(t, "broken pipe")
}

// TestDemoPortAndStatusCommand runs the demo with --port: the sync API
// (and its /metrics) answers on that port, the status command the demo prints works while
// it runs, and a SIGTERM with stdout gone still cleans up.
func TestDemoPortAndStatusCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, port, err := net.SplitHostPort(harness.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	d := startDemo(t, "Press Ctrl-C", "--port", port)

	for path, want := range map[string]string{"/healthz": `"ok":true`, "/metrics": "syncpipe_"} {
		if code, body := harness.Get(ctx, "127.0.0.1:"+port, path, ""); code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET %s on --port %s: %d, want 200 and %q in:\n%s", path, port, code, want, body)
		}
	}

	// The printed command names this program (the syncpipe binary the
	// test built) and its arguments.
	m := regexp.MustCompile(`(?m)^  Replication status: (\S+) (status --config \S+)$`).FindStringSubmatch(d.out.String())
	if m == nil {
		t.Fatalf("the demo printed no status command:\n%s", d.out.String())
	}
	if exe := harness.Binary(t); !sameFile(m[1], exe) {
		t.Fatalf("status command runs %s, not this program (%s)", m[1], exe)
	}
	code, stdout, stderr := harness.Run(t, ctx, strings.Fields(m[2])...)
	if code != 0 || !strings.Contains(stdout+stderr, "GROUP") {
		t.Fatalf("%s: exit %d\n%s%s", m[0], code, stdout, stderr)
	}

	_ = d.stdout.Close()
	d.Signal(syscall.SIGTERM)
	d.stoppedAndCleanedUp(t, "terminated")
}

func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// TestDemoBadPort: a --port that cannot be used is one line and exit 2,
// before any cluster starts.
func TestDemoBadPort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, busy, _ := net.SplitHostPort(taken.Addr().String())
	for _, tc := range []struct{ port, want string }{
		{"70000", "demo: --port 70000: want a TCP port, 1-65535 (or 0 for a free one)"},
		{"-1", "demo: --port -1: want a TCP port"},
		{busy, "demo: --port " + busy + " is not free: "},
	} {
		code, stdout, stderr := harness.Run(t, ctx, "demo", "--port", tc.port)
		if code != cli.ExitUsage || !strings.HasPrefix(stderr, tc.want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
			t.Errorf("demo --port %s: exit %d, stdout %q, stderr %q; want exit %d and one line starting %q",
				tc.port, code, stdout, stderr, cli.ExitUsage, tc.want)
		}
	}
}
