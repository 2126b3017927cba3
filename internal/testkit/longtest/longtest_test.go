package longtest

import (
	"strings"
	"testing"
)

func TestPickAndSeedFollowTheEnvironment(t *testing.T) {
	t.Setenv(EnvLong, "")
	t.Setenv(EnvSeed, "")
	if Long() || Pick(1, 2) != 1 {
		t.Fatal("default size is not small")
	}
	if s := Seed(t); s != DefaultSeed {
		t.Fatalf("default seed %d, want %d", s, DefaultSeed)
	}
	t.Setenv(EnvSeed, "42")
	if s := Seed(t); s != 42 {
		t.Fatalf("seed %d, want 42", s)
	}
	t.Setenv(EnvLong, "1")
	if !Long() || Pick(1, 2) != 2 {
		t.Fatal("long mode is not full size")
	}
	cmd := Rerun(t, 42)
	for _, want := range []string{"SYNCPIPE_TEST_LONG=1 ", "SYNCPIPE_TEST_SEED=42 ", "-run '^TestPickAndSeedFollowTheEnvironment$'", "./internal/testkit/longtest"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("rerun command %q lacks %q", cmd, want)
		}
	}
}
