// Package gitbuild builds syncpipe as of an earlier git revision, for the
// tests and benchmarks that run a previous version next to the current
// one (a comparison run, an upgrade test). The repository's working tree
// and index are never touched: `git archive rev` is unpacked into a
// directory of its own and built there.
package gitbuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Syncpipe builds ./cmd/syncpipe as of the git revision rev of the
// repository at repo ("" for the working directory's), without -race,
// into dir, and returns the binary's path (dir/syncpipe-<short hash>).
// The source is unpacked under dir/src-<short hash>. Only the Go module
// proxy is needed beyond the repository, for modules the module cache
// lacks.
func Syncpipe(ctx context.Context, repo, dir, rev string) (string, error) {
	parse := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", rev+"^{commit}")
	parse.Dir = repo
	out, err := parse.Output()
	if err != nil {
		return "", fmt.Errorf("build syncpipe at %s: git rev-parse: %w", rev, err)
	}
	hash := strings.TrimSpace(string(out))
	src := filepath.Join(dir, "src-"+hash)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("build syncpipe at %s: %w", rev, err)
	}
	// From the repository's root: run in a subdirectory, git archive
	// would pack only that directory.
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", hash)
	archive.Dir = repo
	if top, err := topLevel(ctx, repo); err == nil {
		archive.Dir = top
	}
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("build syncpipe at %s: %w", rev, err)
	}
	untar.Stdin = pipe
	var aerr, terr strings.Builder
	archive.Stderr, untar.Stderr = &aerr, &terr
	if err := untar.Start(); err != nil {
		return "", fmt.Errorf("build syncpipe at %s: tar: %w", rev, err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", fmt.Errorf("build syncpipe at %s: git archive: %w\n%s", rev, err, aerr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("build syncpipe at %s: tar: %w\n%s", rev, err, terr.String())
	}
	bin, err := filepath.Abs(filepath.Join(dir, "syncpipe-"+hash))
	if err != nil {
		return "", fmt.Errorf("build syncpipe at %s: %w", rev, err)
	}
	build := exec.CommandContext(ctx, GoTool(), "build", "-o", bin, "./cmd/syncpipe")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build syncpipe at %s: %w\n%s", rev, err, out)
	}
	return bin, nil
}

// topLevel is the root of the work tree repo is in.
func topLevel(ctx context.Context, repo string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// GoTool is the go command: the one on PATH, else $GOROOT/bin/go.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if p := filepath.Join(os.Getenv("GOROOT"), "bin", "go"); os.Getenv("GOROOT") != "" {
		return p
	}
	return "go"
}
