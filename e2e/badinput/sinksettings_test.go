package badinput

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// TestValidateReportsSinkSettings runs `syncpipe validate` as a child
// process on a pipeline whose jsonl settings hold a mistyped value and an
// unknown key: both are reported with their file positions, offline.
func TestValidateReportsSinkSettings(t *testing.T) {
	t.Parallel()
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := harness.Run(t, ctx, "validate", "--offline", "--config", cfg)
	out := stdout + stderr
	if code != cli.ExitUsage {
		t.Fatalf("validate: exit %d, want %d; output:\n%s", code, cli.ExitUsage, out)
	}
	for _, want := range []string{
		cfg + `:13:9: pipelines[1].sink.settings.fsync: want a boolean, got the string "maybe" (sink jsonl)`,
		cfg + `:14:9: pipelines[1].sink.settings.fsycn: unknown setting (did you mean "fsync"? known: dir, fsync) (sink jsonl)`,
		"2 problem(s) found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}

// TestValidateRefusesBucketstoreGroup: bucket storage's sink has no
// settings any more (`syncpipe run` keeps the replication group for the
// sync rules version itself), so a config that still pins a group gets
// one error at the setting's position instead of a key that does nothing.
func TestValidateRefusesBucketstoreGroup(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "syncpipe.yaml")
	if err := os.WriteFile(cfg, []byte(`source:      {uri: "postgres://app@127.0.0.1:1/app"}
storage:     {uri: "postgres://app@127.0.0.1:1/syncpipe"}
sync_rules:  {content: "bucket_definitions: {global: {data: [SELECT * FROM lists]}}"}
api:
  auth: {audience: [syncpipe], hs256_secrets: ["a-long-random-secret-for-the-check"]}
pipelines:
  - name: store
    sink: {type: bucketstore, settings: {group: 2}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := harness.Run(t, ctx, "validate", "--offline", "--config", cfg)
	out := stdout + stderr
	if code != cli.ExitUsage {
		t.Fatalf("validate: exit %d, want %d; output:\n%s", code, cli.ExitUsage, out)
	}
	want := cfg + `:8:42: pipelines[0].sink.settings.group: unknown setting (this sink takes no settings) (sink bucketstore)`
	if !strings.Contains(out, want) || !strings.Contains(out, "1 problem(s) found") {
		t.Errorf("validate output lacks %q and one problem:\n%s", want, out)
	}
}
