// Package harness is the one child-process harness of syncpipe's
// end-to-end tests (the e2e/... packages): the syncpipe binary built once
// per test package, child processes started, signalled and killed with
// their logs kept, a source and storage database pair with a config for
// them, tokens, a sync client that verifies checksums, /healthz and
// /metrics readers, and the todo data set.
//
// A package opts in with
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
// Each test gets databases of its own on the package's throwaway cluster
// (internal/testkit/pgtest), so tests call t.Parallel.
package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/gitbuild"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// builds holds the binaries built by this test binary, by package path
// (./cmd/syncpipe, ./examples/httpsink) and " -race" when built with it,
// each built once.
var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
	binDir   string
)

// build is one main package's binary, built on first use.
type build struct {
	once sync.Once
	path string
	err  error
}

// Main runs the package's tests, then stops the test cluster and removes
// the built binaries.
func Main(m *testing.M) {
	pgtest.MainThen(m, func() {
		if binDir != "" {
			_ = os.RemoveAll(binDir)
		}
	})
}

// Binary returns the path of the syncpipe binary, building it on first
// use: `go build ./cmd/syncpipe`, with -race when the tests run with it,
// so children are checked for races as the tests are.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryOf(t, "./cmd/syncpipe")
}

// PlainBinary returns the path of the syncpipe binary built without
// -race whatever the tests run with, for a test that measures the
// process's memory: the race detector's shadow memory and bookkeeping
// grow the child's RSS several times over what the product uses (a
// slow WebSocket stream measured +5 MiB with it, +1.2 MiB without).
func PlainBinary(t testing.TB) string {
	t.Helper()
	return binaryOf(t, "./cmd/syncpipe", false)
}

// BinaryOf is Binary for another main package of the module, given as a
// path from the module root (e.g. "./examples/httpsink"), for tests of a
// program built on syncpipe's packages.
func BinaryOf(t testing.TB, pkg string) string {
	t.Helper()
	return binaryOf(t, pkg, raceEnabled)
}

// BinaryAt returns the path of the syncpipe binary as of the git
// revision rev (a previous version, for an upgrade test), built without
// -race from `git archive rev` on first use (internal/testkit/gitbuild),
// once per test binary. The repository's full history must be there, as
// in CI's clone.
func BinaryAt(t testing.TB, rev string) string {
	t.Helper()
	key := "rev " + rev
	buildsMu.Lock()
	b, ok := builds[key]
	if !ok {
		b = &build{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = gitBuild(rev) })
	if b.err != nil {
		t.Fatalf("harness: %v", b.err)
	}
	return b.path
}

// gitBuild builds syncpipe at rev into the package's binary directory.
func gitBuild(rev string) (string, error) {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if err := makeBinDir(); err != nil {
		return "", fmt.Errorf("build syncpipe at %s: %w", rev, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return gitbuild.Syncpipe(ctx, root, filepath.Join(binDir, "rev"), rev)
}

// makeBinDir creates the package's binary directory, which Main removes;
// buildsMu is held.
func makeBinDir() error {
	if binDir != "" {
		return nil
	}
	var err error
	binDir, err = os.MkdirTemp("", "syncpipe-e2e-")
	return err
}

// binaryOf builds pkg, with -race if race, once per test binary.
func binaryOf(t testing.TB, pkg string, race bool) string {
	t.Helper()
	key := pkg
	if race {
		key += " -race"
	}
	buildsMu.Lock()
	b, ok := builds[key]
	if !ok {
		b = &build{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(pkg, race) })
	if b.err != nil {
		t.Fatalf("harness: %v", b.err)
	}
	return b.path
}

// goBuild builds pkg into the package's binary directory; builds run one
// at a time (go build is parallel itself).
func goBuild(pkg string, race bool) (string, error) {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if err := makeBinDir(); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	// Both builds keep the package's name (a program may print it): the
	// race one in a directory of its own.
	dir, args := binDir, []string{"build"}
	if race {
		dir, args = filepath.Join(binDir, "race"), append(args, "-race")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	args = append(args, "-o", out)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the module root: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// Root returns the module's root directory (for README and testdata paths).
func Root(t testing.TB) string {
	t.Helper()
	d, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
