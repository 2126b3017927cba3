package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestRunWritesCPUProfile checks that --cpu-profile leaves a profile even
// when the run ends early (here: its config does not exist), since the
// profile is started first and stopped on every way out.
func TestRunWritesCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "run.pprof")
	var stderr bytes.Buffer
	err := runRun(context.Background(), []string{"--config", filepath.Join(dir, "missing.yaml"), "--cpu-profile", prof},
		&bytes.Buffer{}, &stderr)
	if err == nil {
		t.Fatal("run with a missing config succeeded")
	}
	b, rerr := os.ReadFile(prof)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // pprof profiles are gzipped protobuf
		t.Fatalf("profile is not a gzipped pprof profile: %d bytes", len(b))
	}
	if err := runRun(context.Background(), []string{"--config", "x.yaml", "--cpu-profile", filepath.Join(dir, "no", "such", "dir", "p")},
		&bytes.Buffer{}, &stderr); err == nil {
		t.Fatal("an unwritable --cpu-profile path was accepted")
	}
}
