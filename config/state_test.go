package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStorageOnlyWhenBucketstore checks which of storage.uri and state_dir
// a config needs: storage when a pipeline writes to bucketstore (the
// default pipeline does), else state_dir, never both.
func TestStorageOnlyWhenBucketstore(t *testing.T) {
	const head = "source: {uri: \"postgres://a@h/db\"}\nsync_rules: {content: \"bucket_definitions: {}\"}\n"
	const jsonl = "pipelines:\n  - name: audit\n    sink: {type: jsonl, settings: {dir: out}}\n"
	for _, tc := range []struct {
		name, yaml string
		want       string // "" = loads
	}{
		{"custom only, state_dir", head + "state_dir: state\n" + jsonl, ""},
		{"custom only, no state_dir", head + jsonl, "c.yaml: state_dir: required: the directory of the pipelines' state files"},
		{"custom with storage", head + "storage: {uri: \"postgres://a@h/st\"}\n" + jsonl, ""},
		{"storage and state_dir", head + "storage: {uri: \"postgres://a@h/st\"}\nstate_dir: state\n" + jsonl,
			"c.yaml:4:1: state_dir: set either a storage section or state_dir, not both"},
		{"a storage section without a URI", head + "storage: {schema: sp}\n" + jsonl, "c.yaml:3:1: storage.uri: required"},
		{"default pipeline, no storage", head, "c.yaml: storage.uri: required: the postgres:// URI of bucket storage"},
		{"bucketstore pipeline, no storage", head + "state_dir: state\n" + jsonl + "  - name: b\n    sink: {type: bucketstore}\n",
			"c.yaml: storage.uri: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBytes("c.yaml", []byte(tc.yaml))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want %q", err, tc.want)
			}
		})
	}
}

// TestStateFileNextToConfig checks that a relative state_dir is the
// config file's neighbour, like sync_rules.path, and that a config without
// storage needs no API settings.
func TestStateFileNextToConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	err := os.WriteFile(path, []byte("source: {uri: \"postgres://a@h/db\"}\nsync_rules: {content: \"bucket_definitions: {}\"}\nstate_dir: state\n"+
		"pipelines:\n  - name: audit\n    sink: {type: jsonl, settings: {dir: out}}\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.StateFile("audit"), filepath.Join(dir, "state", "audit.state.json"); got != want {
		t.Errorf("StateFile = %s; want %s", got, want)
	}
	if cfg.UsesStorage() {
		t.Error("UsesStorage for a config of custom pipelines without storage")
	}
	if err := cfg.ValidateServe(); err != nil {
		t.Errorf("ValidateServe without storage: %v", err)
	}
}
