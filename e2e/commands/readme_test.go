package commands

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

// TestReadmeQuickStart: the config and the sync rules that "Run it on your
// database" shows pass `validate --offline` as printed, and `token` mints a
// token with them, so a newcomer who copies them starts from a file that
// works.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := os.ReadFile(filepath.Join(harness.Root(t), "README.md"))
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
	env := []string{"HS256_SECRET=" + strings.Repeat("5e", 32)} // as `openssl rand -hex 32` gives
	cfg := filepath.Join(dir, "syncpipe.yaml")
	if code, stdout, stderr := harness.RunWith(t, ctx, harness.ProcConfig{Args: []string{"validate", "--offline", "--config", cfg}, Env: env}); code != cli.ExitOK {
		t.Fatalf("validate --offline of the README's config: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := harness.RunWith(t, ctx, harness.ProcConfig{Args: []string{"token", "--config", cfg, "--sub", "user1", "--ttl", "1h"}, Env: env}); code != cli.ExitOK || strings.Count(stdout, ".") != 2 {
		t.Fatalf("token with the README's config: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
