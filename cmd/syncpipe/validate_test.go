package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/config"
)

var update = flag.Bool("update", false, "rewrite golden files")

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestValidateBadConfig checks every problem of testdata/bad.yaml is listed
// with file:line:col and key path, and the exit code is 2.
func TestValidateBadConfig(t *testing.T) {
	// bad.yaml relies on HS256_SECRET being unset; t.Setenv restores it.
	t.Setenv("HS256_SECRET", "")
	os.Unsetenv("HS256_SECRET")
	code, _, stderr := runCLI(t, "validate", "--config", "../../testdata/bad.yaml")
	if code != exitUsage {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitUsage, stderr)
	}
	golden := filepath.Join("testdata", "validate_bad.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(stderr), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if stderr != string(want) {
		t.Fatalf("validate output differs from %s:\n--- got\n%s\n--- want\n%s", golden, stderr, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n")[:1] {
		if !strings.HasPrefix(line, "../../testdata/bad.yaml:") {
			t.Fatalf("line lacks file position: %q", line)
		}
	}
}

func TestValidateGoodConfig(t *testing.T) {
	code, stdout, stderr := runCLI(t, "validate", "--config", "../../testdata/good.yaml")
	if code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "ok") {
		t.Fatalf("stdout = %q", stdout)
	}
}

func TestValidateRequiresConfig(t *testing.T) {
	code, _, stderr := runCLI(t, "validate")
	if code != exitUsage || !strings.Contains(stderr, "--config is required") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestReadmeConfigReference keeps the README's reference table generated
// from the config structs.
func TestReadmeConfigReference(t *testing.T) {
	const begin, end = "<!-- BEGIN CONFIG REFERENCE", "<!-- END CONFIG REFERENCE -->"
	path := "../../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README lacks the config reference markers")
	}
	i += strings.Index(s[i:], "\n") + 1
	want := "\n" + config.Reference() + "\n"
	if s[i:j] == want {
		return
	}
	if !*update {
		t.Fatalf("README config reference is stale; run: go test ./cmd/syncpipe -run TestReadmeConfigReference -update")
	}
	if err := os.WriteFile(path, []byte(s[:i]+want+s[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
}
