package cli

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

var update = flag.Bool("update", false, "rewrite golden files")

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestValidateBadConfig checks every problem of testdata/bad.yaml is listed
// with file:line:col and key path, and the exit code is 2.
func TestValidateBadConfig(t *testing.T) {
	// bad.yaml relies on HS256_SECRET being unset; t.Setenv restores it.
	t.Setenv("HS256_SECRET", "")
	os.Unsetenv("HS256_SECRET")
	code, _, stderr := runCLI(t, "validate", "--config", "../testdata/bad.yaml")
	if code != ExitUsage {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
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
		if !strings.HasPrefix(line, "../testdata/bad.yaml:") {
			t.Fatalf("line lacks file position: %q", line)
		}
	}
}

func TestValidateGoodConfig(t *testing.T) {
	code, stdout, stderr := runCLI(t, "validate", "--config", "../testdata/good.yaml")
	if code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "ok") {
		t.Fatalf("stdout = %q", stdout)
	}
}

func TestValidateRequiresConfig(t *testing.T) {
	code, _, stderr := runCLI(t, "validate")
	if code != ExitUsage || !strings.Contains(stderr, "--config is required") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestReadmeConfigReference keeps the README's reference tables generated:
// the config keys from the config structs, the sink settings from the
// registered sinks' specs.
func TestReadmeConfigReference(t *testing.T) {
	readmeBlock(t, "CONFIG REFERENCE", config.Reference())
	readmeBlock(t, "SINK REFERENCE", sinks.Reference())
}

// readmeBlock checks (with -update: rewrites) the README text between the
// markers named name.
func readmeBlock(t *testing.T, name, want string) {
	t.Helper()
	begin, end := "<!-- BEGIN "+name, "<!-- END "+name+" -->"
	path := "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README lacks the %s markers", name)
	}
	i += strings.Index(s[i:], "\n") + 1
	want = "\n" + want + "\n"
	if s[i:j] == want {
		return
	}
	if !*update {
		t.Fatalf("README %s is stale; run: go test ./cli -run TestReadmeConfigReference -update", strings.ToLower(name))
	}
	if err := os.WriteFile(path, []byte(s[:i]+want+s[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestValidateReportsRuleErrorsWithPositions(t *testing.T) {
	code, _, stderr := runCLI(t, "validate", "--config", "../testdata/bad_rules_config.yaml")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
	}
	for _, want := range []string{
		`bad_rules.yaml:6:16: bucket "by_list" data[1]: unknown function "frobnicate"`,
		`bad_rules.yaml:9:33: bucket "global" data[0]: joins are not supported`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// TestValidateInlineRulesPositions checks that errors in inline rules point
// at the config file's lines.
func TestValidateInlineRulesPositions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	err := os.WriteFile(path, []byte(`source: {uri: "postgres://u@127.0.0.1:5432/app"}
storage: {uri: "postgres://u@127.0.0.1:5432/st"}
sync_rules:
  content: |
    bucket_definitions:
      global:
        data:
          - SELECT * FROM lists WHERE nosuchfn(id) = 1
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "validate", "--config", path)
	if code != ExitUsage || !strings.Contains(stderr, path+":8:") {
		t.Fatalf("exit %d, stderr %q: want an error at %s:8", code, stderr, path)
	}
}

// TestValidateStreams: a Sync Streams file validates (and counts its
// streams), CTEs and inner joins included; a form syncpipe does not
// support yet is refused with its file:line:column.
func TestValidateStreams(t *testing.T) {
	dir := t.TempDir()
	write := func(name, rules string) string {
		path := filepath.Join(dir, name)
		err := os.WriteFile(path, []byte(`source: {uri: "postgres://u@127.0.0.1:5432/app"}
storage: {uri: "postgres://u@127.0.0.1:5432/st"}
api: {auth: {audience: [syncpipe], hs256_secrets: [a-long-enough-secret-for-the-test-0123]}}
sync_rules:
  content: |
    config: {edition: 3}
    streams:
`+rules), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", `      my_lists:
        auto_subscribe: true
        query: SELECT * FROM lists WHERE owner_id = auth.user_id()
      list_todos:
        query: SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
`)
	code, stdout, stderr := runCLI(t, "validate", "--offline", "--config", good)
	if code != ExitOK || !strings.Contains(stdout, "2 sync stream(s) over 2 table(s)") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want ok with 2 streams over 2 tables", code, stdout, stderr)
	}
	bad := write("bad.yaml", `      s:
        query: SELECT * FROM t WHERE a = upper(auth.user_id())
`)
	code, _, stderr = runCLI(t, "validate", "--offline", "--config", bad)
	if code != ExitUsage || !strings.Contains(stderr, bad+":9:") || !strings.Contains(stderr, `auth.user_id() is not supported here yet`) {
		t.Fatalf("exit %d, stderr %q: want an expression on the request side refused at %s:9", code, stderr, bad)
	}
	// CTEs (top-level and a stream's) and inner joins validate; an
	// unused CTE is a warning at its name.
	ctes := write("ctes.yaml", `      comments:
        auto_subscribe: true
        query: SELECT c.* FROM comments c JOIN org_members m ON c.org_id = m.org_id WHERE m.user_id = auth.user_id()
      projects:
        with:
          mine: SELECT id FROM projects WHERE owner = auth.user_id()
        queries:
          - SELECT * FROM projects WHERE org_id IN user_orgs
          - SELECT * FROM issues WHERE project_id IN (SELECT id FROM mine)
    with:
      user_orgs: SELECT org_id FROM org_members WHERE user_id = auth.user_id()
      spare: SELECT id FROM projects
`)
	code, stdout, stderr = runCLI(t, "validate", "--offline", "--config", ctes)
	if code != ExitOK || !strings.Contains(stdout, "2 sync stream(s) over 4 table(s)") ||
		!strings.Contains(stderr, ctes+":19:") || !strings.Contains(stderr, "This common table expression isn't referenced.") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want ok with 2 streams over 4 tables and the unused CTE warned at %s:19", code, stdout, stderr, ctes)
	}
	outer := write("outer.yaml", `      s:
        query: SELECT c.* FROM comments c LEFT JOIN org_members m ON c.org_id = m.org_id
`)
	code, _, stderr = runCLI(t, "validate", "--offline", "--config", outer)
	if code != ExitUsage || !strings.Contains(stderr, outer+":9:") || !strings.Contains(stderr, "joins are not supported") {
		t.Fatalf("exit %d, stderr %q: want the LEFT JOIN refused at %s:9", code, stderr, outer)
	}
}

// TestReadmeStreamsExample: the README's examples of both forms of sync
// rules, Sync Streams and bucket_definitions, compile without warnings.
func TestReadmeStreamsExample(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```yaml\nconfig:\n  edition: 3\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README has no Sync Streams example (a yaml block starting config: edition: 3)")
	}
	rules, err := syncrules.Parse([]byte("config:\n  edition: 3\n"+block), syncrules.Options{File: "README.md", GroupID: "1"})
	if err != nil {
		t.Fatalf("README's streams example: %v", err)
	}
	if n := len(rules.StreamNames()); n != 3 || len(rules.Warnings()) != 0 {
		t.Errorf("README's streams example: %d streams, warnings %v; want 3 and none", n, rules.Warnings())
	}
	_, block, ok = strings.Cut(string(b), "```yaml\nbucket_definitions:\n")
	block, _, ok2 = strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README has no bucket_definitions example (a yaml block starting bucket_definitions:)")
	}
	rules, err = syncrules.Parse([]byte("bucket_definitions:\n"+block), syncrules.Options{File: "README.md", GroupID: "1"})
	if err != nil {
		t.Fatalf("README's bucket_definitions example: %v", err)
	}
	if n := len(rules.Definitions()); n != 2 || len(rules.Warnings()) != 0 {
		t.Errorf("README's bucket_definitions example: %d definitions, warnings %v; want 2 and none", n, rules.Warnings())
	}
}

// TestValidateHelp: validate's help says what it connects to, as the
// README's Commands section does: by default it checks the source,
// --offline connects nowhere.
func TestValidateHelp(t *testing.T) {
	_, _, help := runCLI(t, "validate", "-h")
	_, _, usage := runCLI(t, "help")
	for _, want := range []string{"-offline", "connecting nowhere", "against the source"} {
		if !strings.Contains(help, want) {
			t.Errorf("validate -h lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(usage, "without connecting anywhere") || !strings.Contains(usage, "what run needs of the source") {
		t.Errorf("the command list misdescribes validate:\n%s", usage)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "syncpipe validate --config F [--offline]   # the config, its sync rules, and what run needs of the source") {
		t.Error("README's Commands section does not describe validate's source checks and --offline")
	}
}
