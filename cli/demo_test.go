package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var dataDirRe = regexp.MustCompile(`\(data in ([^)]+)\)`)

func TestUnknownCommandIsUsageError(t *testing.T) {
	var stderr strings.Builder
	if code := Main(context.Background(), []string{"frobnicate"}, io.Discard, &stderr); code != ExitUsage {
		t.Fatalf("exit code %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) {
		t.Fatalf("stderr = %q", stderr.String())
	}
}

// demoChild is `syncpipe demo` running as a child process, its stdout a
// pipe the test reads and may close, as a `| tee` that dies does.
type demoChild struct {
	*child
	stdout *os.File // the read end of the child's stdout
	out    strings.Builder
	dir    string // the cluster's directory, from the demo's output
}

// startDemo starts `syncpipe demo --lists 2 --todos 20 flags…` and reads
// its stdout until a line contains until.
func startDemo(t *testing.T, until string, flags ...string) *demoChild {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &demoChild{stdout: r}
	d.child = startChild(t, w, nil, nil, append([]string{"demo", "--lists", "2", "--todos", "20"}, flags...)...)
	_ = w.Close() // the child has its own copy
	t.Cleanup(func() {
		_ = r.Close()
		select {
		case <-d.exited:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.exited
		}
		if t.Failed() {
			t.Logf("demo stdout:\n%s\ndemo stderr:\n%s", d.out.String(), d.stderr())
		}
	})
	d.readUntil(t, until)
	return d
}

// readUntil reads the demo's stdout until a line contains s, within a minute.
func (d *demoChild) readUntil(t *testing.T, s string) {
	t.Helper()
	if err := d.stdout.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
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

func (d *demoChild) stderr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

// stoppedAndCleanedUp waits (a minute at most) for the demo to exit, and
// checks it exited 0, its cluster directory is gone, and it said so on
// stderr, in one line naming the directory and why it stopped.
func (d *demoChild) stoppedAndCleanedUp(t *testing.T, why string) {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Fatal("the demo did not exit within a minute")
	}
	if d.err != nil {
		t.Fatalf("demo exited with %v, want exit code 0", d.err)
	}
	if d.dir == "" {
		t.Fatal("the demo did not print its data dir")
	}
	if _, err := os.Stat(d.dir); !os.IsNotExist(err) {
		t.Fatalf("cluster dir %s still exists after the demo ended (stat: %v)", d.dir, err)
	}
	want := regexp.MustCompile(`(?m)^syncpipe demo: .*` + regexp.QuoteMeta(why) + `.*; PostgreSQL stopped and ` + regexp.QuoteMeta(d.dir) + ` removed$`)
	if !want.MatchString(d.stderr()) {
		t.Fatalf("stderr lacks a line matching %s", want)
	}
}

// TestDemoCleansUpWhenStdoutIsGoneAndInterrupted is `syncpipe demo | tee
// out.txt` and Ctrl-C: tee dies, the demo's next write to stdout fails,
// and the demo must still stop its cluster and remove its directory. It
// also checks what the demo printed until then.
func TestDemoCleansUpWhenStdoutIsGoneAndInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped in -short mode")
	}
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
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	d.stoppedAndCleanedUp(t, "interrupt")
}

// TestDemoStopsWhenStdoutIsGone is `syncpipe demo | head -3`: the reader
// goes away while the demo still prints, and the demo stops by itself and
// cleans up instead of running on with nobody to see it.
func TestDemoStopsWhenStdoutIsGone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped in -short mode")
	}
	d := startDemo(t, "(data in ")
	_ = d.stdout.Close()
	d.stoppedAndCleanedUp(t, "broken pipe")
}

// TestDemoPortAndStatusCommand runs the demo with --port: the sync API
// (and its /metrics) answers on that port, the status command the demo prints works while
// it runs, and a SIGTERM with stdout gone still cleans up.
func TestDemoPortAndStatusCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	d := startDemo(t, "Press Ctrl-C", "--port", port)

	for path, want := range map[string]string{"/healthz": `"ok":true`, "/metrics": "syncpipe_"} {
		if code, body := httpGet(ctx, t, "http://127.0.0.1:"+port+path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET %s on --port %s: %d, want 200 and %q in:\n%s", path, port, code, want, body)
		}
	}

	// The printed command names this program (here the test binary, which
	// is syncpipe only with childEnv set) and its arguments.
	m := regexp.MustCompile(`(?m)^  Replication status: (\S+) (status --config \S+)$`).FindStringSubmatch(d.out.String())
	if m == nil {
		t.Fatalf("the demo printed no status command:\n%s", d.out.String())
	}
	if exe, _ := os.Executable(); !sameFile(m[1], exe) {
		t.Fatalf("status command runs %s, not this program (%s)", m[1], exe)
	}
	status := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	status.Env = append(os.Environ(), childEnv+"="+strings.Join(strings.Fields(m[2]), "\x1f"))
	out, err := status.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GROUP") {
		t.Fatalf("%s: %v\n%s", m[0], err, out)
	}

	_ = d.stdout.Close()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	d.stoppedAndCleanedUp(t, "terminated")
}

// httpGet GETs url and returns the status code and body.
func httpGet(ctx context.Context, t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read the body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// TestDemoBadPort: a --port that cannot be used is one line and exit 2,
// before any cluster starts.
func TestDemoBadPort(t *testing.T) {
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
		code, stdout, stderr := runCLI(t, "demo", "--port", tc.port)
		if code != ExitUsage || !strings.HasPrefix(stderr, tc.want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
			t.Errorf("demo --port %s: exit %d, stdout %q, stderr %q; want exit %d and one line starting %q",
				tc.port, code, stdout, stderr, ExitUsage, tc.want)
		}
	}
}
