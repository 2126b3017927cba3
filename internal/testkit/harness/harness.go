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

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// Main runs the package's tests, then stops the test cluster and removes
// the built binary.
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
	buildOnce.Do(func() { binPath, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("harness: %v", buildErr)
	}
	return binPath
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if binDir, err = os.MkdirTemp("", "syncpipe-e2e-"); err != nil {
		return "", fmt.Errorf("build syncpipe: %w", err)
	}
	out := filepath.Join(binDir, "syncpipe")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/syncpipe")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/syncpipe: %w\n%s", err, b)
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
