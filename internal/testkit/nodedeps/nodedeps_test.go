package nodedeps

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClient is a testdata/client copy with a fake npm in bin/: the fake
// records each run in runs.log ("start"/"end" lines), takes a while, and
// installs a node_modules/.bin/node as `npm ci` would.
func fakeClient(t *testing.T, npmBody string) (dir, bin string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "client")
	bin = filepath.Join(root, "bin")
	for _, d := range []string{dir, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string, mode os.FileMode) {
		if err := os.WriteFile(name, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "package.json"), `{"dependencies":{"node":"24.21.0"}}`, 0o644)
	write(filepath.Join(dir, "package-lock.json"), `{"lockfileVersion":3}`, 0o644)
	write(filepath.Join(bin, "node"), "#!/bin/sh\nexit 0\n", 0o755)
	// The fake's own tools from the system, not from the test's PATH.
	write(filepath.Join(bin, "npm"), "#!/bin/sh\nPATH=/usr/bin:/bin\n"+npmBody, 0o755)
	return dir, bin
}

// npmOK is a fake `npm ci`: it logs its start, holds the install for a
// moment (so a second caller arrives while it runs), and installs.
const npmOK = `echo start >> runs.log
sleep 1
rm -rf node_modules && mkdir -p node_modules/.bin && printf '#!/bin/sh\n' > node_modules/.bin/node && chmod +x node_modules/.bin/node
echo end >> runs.log
`

func runs(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestConcurrentEnsureInstallsOnce: two callers at once (as two test
// binaries would be; flock locks conflict between two opens in one
// process too) run `npm ci` once: the second waits for the lock, then
// finds the install done. A third call later does not run it either; a
// changed lockfile reinstalls.
func TestConcurrentEnsureInstallsOnce(t *testing.T) {
	t.Parallel()
	dir, bin := fakeClient(t, npmOK)
	in := installer{dir: dir, path: bin, timeout: time.Minute}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = in.ensure(context.Background())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := runs(t, dir); strings.Join(got, " ") != "start end" {
		t.Fatalf("npm ci runs: %q, want one (start end)", got)
	}
	if err := in.ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := runs(t, dir); len(got) != 2 {
		t.Fatalf("npm ci ran again on an installed tree: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "package-lock.json"), []byte(`{"lockfileVersion":3,"packages":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := in.ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := runs(t, dir); len(got) != 4 {
		t.Fatalf("a changed lockfile did not reinstall: %q", got)
	}
}

// TestMissingNpmIsOneLine: with no npm in PATH the error is one line
// naming the Debian packages to install.
func TestMissingNpmIsOneLine(t *testing.T) {
	t.Parallel()
	dir, bin := fakeClient(t, npmOK)
	if err := os.Remove(filepath.Join(bin, "npm")); err != nil {
		t.Fatal(err)
	}
	err := installer{dir: dir, path: bin, timeout: time.Minute}.ensure(context.Background())
	if err == nil {
		t.Fatal("no error without npm")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "npm not found") || !strings.Contains(msg, "apt-get install nodejs npm") {
		t.Fatalf("error %q: want one line naming npm and `apt-get install nodejs npm`", msg)
	}
	// An empty PATH: both missing, still one line.
	err = installer{dir: dir, path: t.TempDir(), timeout: time.Minute}.ensure(context.Background())
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "node and npm not found") {
		t.Fatalf("empty PATH: error %v", err)
	}
}

// TestFailedInstallIsRetried: an `npm ci` that fails leaves no stamp,
// so the next call installs again; its error carries npm's output.
func TestFailedInstallIsRetried(t *testing.T) {
	t.Parallel()
	dir, bin := fakeClient(t, "echo start >> runs.log\necho 'npm error network ETIMEDOUT' >&2\nexit 1\n")
	in := installer{dir: dir, path: bin, timeout: time.Minute}
	for range 2 {
		err := in.ensure(context.Background())
		if err == nil || !strings.Contains(err.Error(), "ETIMEDOUT") {
			t.Fatalf("error %v: want npm's output", err)
		}
	}
	if got := runs(t, dir); len(got) != 2 {
		t.Fatalf("npm ci runs %q, want 2", got)
	}
}

// TestSlowInstallTimesOut: a stuck `npm ci` ends at the timeout with a
// message that says so.
func TestSlowInstallTimesOut(t *testing.T) {
	t.Parallel()
	dir, bin := fakeClient(t, "exec sleep 60\n")
	err := installer{dir: dir, path: bin, timeout: 500 * time.Millisecond}.ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not finish in 500ms") {
		t.Fatalf("error %v: want the timeout named", err)
	}
}
