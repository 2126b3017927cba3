package benchmarks

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestMain stops the shared PostgreSQL cluster and removes the smoke
// tests' syncpipe build after the tests.
func TestMain(m *testing.M) {
	pgtest.MainThen(m, func() {
		if smokeBinDir != "" {
			_ = os.RemoveAll(smokeBinDir)
		}
	})
}

// The smoke tests' syncpipe, built once per test binary (with -race when
// the test runs with it, so the build reuses the packages this test
// binary was compiled from): a race build of cmd/syncpipe takes a minute
// or more on a busy 2-core machine, and each of the seven smoke tests
// used to make its own.
var (
	smokeBuild  sync.Once
	smokeBinDir string
	smokeBin    string
	smokeErr    error
)

// smokeBinary returns the smoke tests' syncpipe, building it on first use.
func smokeBinary(t *testing.T) string {
	t.Helper()
	smokeBuild.Do(func() {
		if smokeBinDir, smokeErr = os.MkdirTemp("", "syncpipe-bench-smoke-"); smokeErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		smokeBin, smokeErr = BuildSyncpipe(ctx, smokeBinDir, raceEnabled)
		t.Logf("built syncpipe in %v (once for the package's smoke tests)", time.Since(start).Round(time.Millisecond))
	})
	if smokeErr != nil {
		t.Fatal(smokeErr)
	}
	return smokeBin
}

// smokeHarness is what a scenario's smoke test starts from: skipped in
// -short mode (it starts PostgreSQL), a context bounded by limit (from
// after the build) and a harness with the package's syncpipe build and a
// directory of the test's own.
func smokeHarness(t *testing.T, limit time.Duration) (context.Context, *Harness) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL and builds syncpipe; skipped in -short mode")
	}
	bin := smokeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx, &Harness{Syncpipe: bin, Dir: t.TempDir()}
}
