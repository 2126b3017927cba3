package badinput

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// schemaRules name a column (nosuchcol) and a table (gone) the source
// lacks, next to what it has.
const schemaRules = `bucket_definitions:
  global:
    data:
      - SELECT id, nosuchcol FROM todos
  lost:
    data:
      - SELECT * FROM gone
`

// schemaEnv is a source with a todos table and a config whose rules are
// schemaRules; storage is an empty database.
func schemaEnv(t *testing.T, audience string) string {
	t.Helper()
	source, storage := pgtest.NewDB(t), pgtest.NewDB(t)
	conn := pgtest.Connect(t, source)
	if _, err := conn.Exec(context.Background(), `CREATE TABLE todos (id text PRIMARY KEY, description text)`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(schemaRules), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "syncpipe.yaml")
	cfg := fmt.Sprintf(`source: {uri: %q}
storage: {uri: %q}
sync_rules: {path: rules.yaml}
api:
  listen: 127.0.0.1:0
  auth:
    audience: %s
    hs256_secrets: ["a-long-random-secret-of-32-bytes-or-more"]
telemetry: {metrics_listen: ""}
log: {level: info, format: text}
`, source, storage, audience)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCLI runs the syncpipe binary with args to its exit, within a minute.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return harness.Run(t, ctx, args...)
}

// TestValidateChecksRulesAgainstSource: validate reads the source's
// tables and reports what the rules name that it lacks as PowerSync does,
// as warnings (exit 0), each with file, line, bucket, query, column and
// table; --offline judges the file alone.
func TestValidateChecksRulesAgainstSource(t *testing.T) {
	t.Parallel()
	path := schemaEnv(t, "[syncpipe]")
	code, stdout, stderr := runCLI(t, "validate", "--config", path)
	if code != cli.ExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	rules := filepath.Join(filepath.Dir(path), "rules.yaml")
	want := []string{
		rules + `:4:20: bucket "global" data[0]: warning: column "nosuchcol" does not exist in table public.todos`,
		rules + `:7:23: bucket "lost" data[0]: warning: table public.gone does not exist in the source`,
	}
	if got := strings.Split(strings.TrimSpace(stderr), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stderr:\n%s\nwant:\n%s", stderr, strings.Join(want, "\n"))
	}
	if !strings.Contains(stdout, "2 warning(s), checked against the source") {
		t.Fatalf("stdout = %q", stdout)
	}

	code, stdout, stderr = runCLI(t, "validate", "--offline", "--config", path)
	if code != cli.ExitOK || stderr != "" || !strings.Contains(stdout, "not checked against the source (--offline)") {
		t.Fatalf("--offline: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestValidateWithoutSource: a source that cannot be reached costs one
// line on stderr, and the file is judged alone.
func TestValidateWithoutSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "syncpipe.yaml")
	cfg := `source: {uri: "postgres://user@127.0.0.1:1/app"}
storage: {uri: "postgres://user@127.0.0.1:1/syncpipe"}
sync_rules:
  content: |
    bucket_definitions:
      global:
        data:
          - SELECT id, nosuchcol FROM todos
api: {auth: {audience: [a], hs256_secrets: [a-long-random-secret-of-32-bytes-or-more]}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "validate", "--config", path)
	if code != cli.ExitOK || !strings.Contains(stdout, "source not reachable") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "source not checked") {
		t.Fatalf("want one line about the source, got:\n%s", stderr)
	}
}

// TestValidateRejectsWhatRunRejects: run refuses to serve without an
// audience, so validate refuses the file, naming file, line and key.
func TestValidateRejectsWhatRunRejects(t *testing.T) {
	t.Parallel()
	path := schemaEnv(t, "[]")
	code, _, stderr := runCLI(t, "validate", "--offline", "--config", path)
	if code != cli.ExitUsage || !strings.HasPrefix(stderr, path+":7:") || !strings.Contains(stderr, "api.auth.audience: required") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, "run", "--config", path)
	if code == cli.ExitOK || !strings.Contains(stderr, "api.auth.audience") {
		t.Fatalf("run: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestRunWarnsAboutRulesMissingFromSource runs the real binary: at
// start-up `syncpipe run` logs one line per rules problem with the source
// (a warning, as the PowerSync service reports it) and goes on.
func TestRunWarnsAboutRulesMissingFromSource(t *testing.T) {
	t.Parallel()
	path := schemaEnv(t, "[syncpipe]")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := harness.Start(t, harness.ProcConfig{Args: []string{"run", "--config", path, "--role", "replication"}})
	p.WaitLogged(ctx, "syncpipe starting") // the check runs before start-up goes on
	_ = p.Stop()
	var warnings, log []string
	for _, line := range strings.Split(p.Logs(), "\n") {
		log = append(log, line)
		if strings.Contains(line, "sync rules:") {
			warnings = append(warnings, line)
		}
		if strings.Contains(line, "syncpipe starting") {
			break
		}
	}
	if len(warnings) != 2 {
		t.Fatalf("want 2 rules warnings before start-up, got %d; log:\n%s", len(warnings), strings.Join(log, "\n"))
	}
	for i, want := range []string{`level=WARN`, `column \"nosuchcol\" does not exist in table public.todos`} {
		if !strings.Contains(warnings[0], want) {
			t.Errorf("warning %q lacks %q (%d)", warnings[0], want, i)
		}
	}
	if !strings.Contains(warnings[0], `bucket \"global\" data[0]`) || !strings.Contains(warnings[0], "rules.yaml:4:20") {
		t.Errorf("warning lacks position, bucket and query: %s", warnings[0])
	}
	if !strings.Contains(warnings[1], "table public.gone does not exist in the source") {
		t.Errorf("second warning: %s", warnings[1])
	}
}
