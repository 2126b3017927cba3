package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeQuickStart: the config and the sync rules that "Run it on your
// database" shows pass `validate --offline` as printed, and `token` mints a
// token with them, so a newcomer who copies them starts from a file that
// works.
func TestReadmeQuickStart(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"syncpipe.yaml", "rules.yaml"} {
		_, block, ok := strings.Cut(string(b), "```yaml\n# "+name)
		block, _, ok2 := strings.Cut(block, "```")
		if !ok || !ok2 {
			t.Fatalf("README has no quick-start %s (a yaml block starting # %s)", name, name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("# "+name+block), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HS256_SECRET", strings.Repeat("5e", 32)) // as `openssl rand -hex 32` gives
	cfg := filepath.Join(dir, "syncpipe.yaml")
	if code, stdout, stderr := runCLI(t, "validate", "--offline", "--config", cfg); code != ExitOK {
		t.Fatalf("validate --offline of the README's config: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI(t, "token", "--config", cfg, "--sub", "user1", "--ttl", "1h"); code != ExitOK || strings.Count(stdout, ".") != 2 {
		t.Fatalf("token with the README's config: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
