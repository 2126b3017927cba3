// Package nodedeps installs the Node packages of syncpipe's tests: the
// PowerSync client driver and the reference sync-rules compiler in
// testdata/client (package.json, package-lock.json). The tests that need
// them (stages/syncrules' reference tests, internal/testkit/clienttest, end-to-end
// tests with the real client) call Ensure, which runs `npm ci` there on
// first use, once per checkout, so `go test ./...` needs no step of its
// own on a fresh machine — only Node.js and npm (Debian: `apt-get install
// nodejs npm`). Everything else, including the Node ≥ 22 the client runs
// on (the `node` npm package), comes from the npm registry.
//
// Several test binaries run at once (go test runs packages in parallel),
// so the install runs under an flock on testdata/client/.npm-ci.lock: the
// first caller installs, the others wait for it and then find it done.
// Done means node_modules/.syncpipe-npm-ci holds the hash of package.json
// and package-lock.json, written after a successful `npm ci` (which
// empties node_modules first, so a changed lockfile or a half-finished
// install reinstalls), and node_modules/.bin/node exists.
package nodedeps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Timeout bounds one `npm ci` (it downloads about 100 MB from the npm
// registry the first time; under a minute on a usual connection). It is
// below CI's per-binary `go test -timeout 8m`, so a stuck download fails
// with Ensure's message, not a test-binary panic.
const Timeout = 5 * time.Minute

// Install is the one line that names what to install when Node or npm is
// missing.
const Install = "install Node.js and npm (Debian: apt-get install nodejs npm)"

const (
	lockName  = ".npm-ci.lock"
	stampName = ".syncpipe-npm-ci" // inside node_modules
)

// Ensure installs testdata/client's node_modules if needed and returns
// the absolute path of testdata/client. It fails t (never skips) when
// Node or npm is missing or `npm ci` fails.
func Ensure(t testing.TB) string {
	t.Helper()
	dir, err := ClientDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := (installer{dir: dir, path: os.Getenv("PATH"), timeout: Timeout}).ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Node is the Node binary that `npm ci` installed in dir (the `node`
// package: the version sync.mjs needs, whatever the machine's node is).
func Node(dir string) string { return filepath.Join(dir, "node_modules", ".bin", "node") }

// ClientDir is testdata/client of the module the test runs in (go test
// runs a package's tests in its directory; the module root is the
// nearest directory above with go.mod).
func ClientDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("nodedeps: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "testdata", "client"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("nodedeps: no go.mod above %s", wd)
		}
	}
}

// installer is Ensure with what a test changes: the directory, the PATH
// searched for node and npm, the timeout.
type installer struct {
	dir     string
	path    string
	timeout time.Duration
}

func (in installer) ensure(ctx context.Context) error {
	want, err := lockHash(in.dir)
	if err != nil {
		return err
	}
	if in.done(want) {
		return nil
	}
	unlock, err := in.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if in.done(want) { // another test binary installed while we waited
		return nil
	}
	return in.install(ctx, want)
}

// done reports whether node_modules was installed from the current
// package.json and lockfile.
func (in installer) done(want string) bool {
	got, err := os.ReadFile(filepath.Join(in.dir, "node_modules", stampName))
	if err != nil || strings.TrimSpace(string(got)) != want {
		return false
	}
	_, err = os.Stat(Node(in.dir))
	return err == nil
}

// lock takes the install lock, waiting (up to the install timeout and a
// minute) for another process's `npm ci` to finish.
func (in installer) lock(ctx context.Context) (unlock func(), err error) {
	name := filepath.Join(in.dir, lockName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nodedeps: %w", err)
	}
	deadline := time.Now().Add(in.timeout + time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("nodedeps: flock %s: %w", name, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("nodedeps: another process has held %s for over %v (a stuck `npm ci` in %s?)", name, in.timeout+time.Minute, in.dir)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("nodedeps: waiting for %s: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// install runs `npm ci` and writes the stamp.
func (in installer) install(ctx context.Context, want string) error {
	var missing []string
	var npm string
	for _, name := range []string{"node", "npm"} {
		p, ok := lookPath(in.path, name)
		if !ok {
			missing = append(missing, name)
		}
		if name == "npm" {
			npm = p
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("nodedeps: %s not found in PATH, needed for `npm ci` in %s: %s", strings.Join(missing, " and "), in.dir, Install)
	}
	ctx, cancel := context.WithTimeout(ctx, in.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = in.dir
	cmd.Env = append(os.Environ(), "PATH="+in.path)
	cmd.WaitDelay = 10 * time.Second
	started := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("nodedeps: `npm ci` in %s did not finish in %v (is the npm registry reachable?)\n%s", in.dir, in.timeout, tail(out, 4000))
	}
	if err != nil {
		return fmt.Errorf("nodedeps: `cd %s && npm ci --no-audit --no-fund` failed: %v\n%s", in.dir, err, tail(out, 4000))
	}
	if _, err := os.Stat(Node(in.dir)); err != nil {
		return fmt.Errorf("nodedeps: `npm ci` in %s installed no %s (the `node` package of package.json)", in.dir, Node(in.dir))
	}
	if err := os.WriteFile(filepath.Join(in.dir, "node_modules", stampName), []byte(want+"\n"), 0o644); err != nil {
		return fmt.Errorf("nodedeps: %w", err)
	}
	fmt.Fprintf(os.Stderr, "nodedeps: npm ci in %s took %v\n", in.dir, time.Since(started).Round(100*time.Millisecond))
	return nil
}

// lockHash is the hash of what node_modules is installed from.
func lockHash(dir string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", fmt.Errorf("nodedeps: %w", err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lookPath is exec.LookPath over the given PATH value.
func lookPath(path, name string) (string, bool) {
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
