package clienttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/logbuf"
	"github.com/syncpipe/syncpipe/internal/testkit/nodedeps"
)

// clientDir is the Node project holding the PowerSync client driver.
var clientDir = func() string {
	d, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "client"))
	if err != nil {
		panic(err)
	}
	return d
}()

// nodeBin is the Node ≥ 22 binary the `node` npm package installs
// (node:sqlite needs it; the machine's own node may be older).
var nodeBin = nodedeps.Node(clientDir)

var (
	setupOnce sync.Once
	setupErr  error
)

// requireClient installs testdata/client's node_modules when missing or
// stale (internal/testkit/nodedeps: npm ci from the committed lockfile, under a
// lock shared with the other test binaries) and checks that its Node can
// load node:sqlite. It fails the test — never skips — naming what failed.
func requireClient(t *testing.T) {
	t.Helper()
	nodedeps.Ensure(t)
	setupOnce.Do(func() { setupErr = checkNode() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func checkNode() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := `require("node:sqlite"); process.stdout.write(process.versions.node)`
	out, err := exec.CommandContext(ctx, nodeBin, "-e", check).CombinedOutput()
	if err != nil {
		return fmt.Errorf("clienttest: `%s -e '%s'` failed: %v\n%s", nodeBin, check, err, tail(out, 2000))
	}
	return nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// event is one JSON line the driver prints.
type event struct {
	Event   string           `json:"event"`
	Lists   *int             `json:"lists"`
	Todos   *int             `json:"todos"`
	N       *int             `json:"n"`
	Rows    []map[string]any `json:"rows"`
	Message string           `json:"message"`
	Error   string           `json:"error"`
	// HasSynced and Connected: priority_synced's and connection's.
	HasSynced *bool `json:"has_synced"`
	Connected *bool `json:"connected"`
	raw       string
}

// client is a running sync.mjs process.
type client struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   interface{ Write([]byte) (int, error) }
	events  chan event
	stderr  *logbuf.Buffer
	exited  chan struct{} // closed once the process ended; waitErr is then set
	waitErr error
}

// startClient runs the driver against endpoint with token. extra are more
// driver flags. The process is killed when the test ends; its SDK log is
// printed if the test failed.
func startClient(t *testing.T, endpoint, token string, extra ...string) *client {
	t.Helper()
	requireClient(t)
	args := append([]string{filepath.Join(clientDir, "sync.mjs"), "--endpoint", endpoint, "--token", token}, extra...)
	cmd := exec.Command(nodeBin, args...)
	cmd.Dir = clientDir
	// Only 127.0.0.1 is contacted: keep proxies (which the SDK honours) out.
	for _, kv := range os.Environ() {
		if !strings.HasSuffix(strings.ToLower(strings.SplitN(kv, "=", 2)[0]), "_proxy") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.WaitDelay = 5 * time.Second
	c := &client{t: t, cmd: cmd, events: make(chan event, 64), stderr: &logbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdin = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", nodeBin, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = event{Event: "unparsed"}
			}
			ev.raw = sc.Text()
			c.events <- ev
		}
		c.waitErr = cmd.Wait()
		close(c.exited)
		close(c.events)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("client SDK log:\n%s", tail([]byte(c.stderr.String()), 20000))
		}
	})
	return c
}

// next returns the next event, failing on timeout, on an error event and
// when the process ended.
func (c *client) next(timeout time.Duration) event {
	c.t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			<-c.exited
			c.t.Fatalf("client exited without the expected event: %v", c.waitErr)
		}
		if ev.Event == "error" {
			c.t.Fatalf("client reported an error: %s\n%s", ev.Message, ev.Error)
		}
		if ev.Event == "unparsed" {
			c.t.Fatalf("client printed a line that is not JSON: %q", ev.raw)
		}
		return ev
	case <-time.After(timeout):
		c.t.Fatalf("no event from the client within %s", timeout)
	}
	return event{}
}

// expect reads the next event and checks its kind.
func (c *client) expect(kind string, timeout time.Duration) event {
	c.t.Helper()
	ev := c.next(timeout)
	if ev.Event != kind {
		c.t.Fatalf("client event %s, want %s", ev.raw, kind)
	}
	return ev
}

func (c *client) send(cmd map[string]any) {
	c.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("write to client: %v", err)
	}
}

// exit asks the driver to disconnect and checks it exits cleanly.
func (c *client) exit() {
	c.t.Helper()
	c.send(map[string]any{"cmd": "exit"})
	c.expect("bye", time.Minute)
	select {
	case ev, ok := <-c.events:
		if ok {
			c.t.Fatalf("client printed after bye: %s", ev.raw)
		}
	case <-time.After(time.Minute):
		c.t.Fatal("client did not exit after bye")
	}
	<-c.exited
	if c.waitErr != nil {
		c.t.Fatalf("client exit: %v", c.waitErr)
	}
}
