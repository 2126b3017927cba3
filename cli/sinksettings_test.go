package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateReportsSinkSettings runs `syncpipe validate` as a child
// process on a pipeline whose jsonl settings hold a mistyped value and an
// unknown key: both are reported with their file positions, offline.
func TestValidateReportsSinkSettings(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "syncpipe.yaml")
	if err := os.WriteFile(cfg, []byte(`source:      {uri: "postgres://app@127.0.0.1:1/app"}
storage:     {uri: "postgres://app@127.0.0.1:1/syncpipe"}
sync_rules:  {content: "bucket_definitions: {global: {data: [SELECT * FROM lists]}}"}
api:
  auth: {audience: [syncpipe], hs256_secrets: ["a-long-random-secret-for-the-check"]}
pipelines:
  - name: store
  - name: audit
    sink:
      type: jsonl
      settings:
        dir: out
        fsync: maybe
        fsycn: true
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{"validate", "--offline", "--config", cfg}, "\x1f"))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitUsage {
		t.Fatalf("validate: %v, want exit %d; output:\n%s", err, ExitUsage, out)
	}
	for _, want := range []string{
		cfg + `:13:9: pipelines[1].sink.settings.fsync: want a boolean, got the string "maybe" (sink jsonl)`,
		cfg + `:14:9: pipelines[1].sink.settings.fsycn: unknown setting (did you mean "fsync"? known: dir, fsync) (sink jsonl)`,
		"2 problem(s) found",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}
