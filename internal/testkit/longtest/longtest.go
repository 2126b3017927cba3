// Package longtest sizes the long work of syncpipe's tests: torture trials,
// soak and crash loops, many-client hardening, benchmark smoke. The default
// `go test ./...` runs each at a small size with a fixed seed, so a change
// gets a quick, repeatable answer; `task test:long` (SYNCPIPE_TEST_LONG=1)
// runs them at full size with a fresh seed each run, to find what the small
// size does not.
//
// An environment variable, not a test flag: a flag defined here would make
// `go test ./... -long` fail in every package that does not import it.
package longtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	// EnvLong set to 1 (or any true value strconv.ParseBool accepts) runs
	// the long work at full size.
	EnvLong = "SYNCPIPE_TEST_LONG"
	// EnvSeed fixes the seed of every randomised test, to replay a failure.
	EnvSeed = "SYNCPIPE_TEST_SEED"
)

// DefaultSeed is the seed of the default (small) size: the same choices on
// every run, so a failure there is a failure of the change.
const DefaultSeed = 20261207

// Long reports whether the long work runs at full size.
func Long() bool {
	v, err := strconv.ParseBool(os.Getenv(EnvLong))
	return err == nil && v
}

// Pick returns small by default and full when Long.
func Pick[T any](small, full T) T {
	if Long() {
		return full
	}
	return small
}

// Seed returns the seed for t's random choices: EnvSeed when set, else
// DefaultSeed, or the clock in the long mode. It logs the seed, and when t
// fails it logs the command that replays the run.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(DefaultSeed)
	if v := os.Getenv(EnvSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not an unsigned integer", EnvSeed, v)
		}
		seed = s
	} else if Long() {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay: %s", Rerun(t, seed))
		}
	})
	return seed
}

// Rerun is the shell command that runs t again with seed at the current
// size.
func Rerun(t testing.TB, seed uint64) string {
	long := ""
	if Long() {
		long = EnvLong + "=1 "
	}
	return fmt.Sprintf("%s%s=%d go test -race -count=1 -run '^%s$' ./%s", long, EnvSeed, seed, t.Name(), pkgDir())
}

// pkgDir is the test's package directory relative to the module root
// (go test runs a package's tests in its directory).
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "..."
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			rel, err := filepath.Rel(d, wd)
			if err != nil || rel == "." {
				return "."
			}
			return filepath.ToSlash(rel)
		}
		if filepath.Dir(d) == d {
			return "..."
		}
	}
}
