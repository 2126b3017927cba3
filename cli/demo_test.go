package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

var dataDirRe = regexp.MustCompile(`\(data in ([^)]+)\)`)

// TestDemoStopsAndCleansUpOnInterrupt runs the demo until it waits for
// Ctrl-C, cancels it like a signal would, and checks the cluster's directory
// is gone afterwards.
func TestDemoStopsAndCleansUpOnInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL; skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	pr, pw := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		code := Main(runCtx, []string{"demo", "--lists", "5", "--todos", "50"}, pw, &stderr)
		pw.Close()
		done <- code
	}()

	var out strings.Builder
	dir := ""
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := dataDirRe.FindStringSubmatch(line); m != nil {
			dir = m[1]
		}
		if strings.Contains(line, "Press Ctrl-C") {
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("cluster dir %q not there while the demo runs: %v", dir, err)
			}
			interrupt()
		}
	}
	if code := <-done; code != ExitOK {
		t.Fatalf("exit code %d; stdout:\n%s\nstderr:\n%s", code, out.String(), stderr.String())
	}
	if !strings.Contains(out.String(), "5 lists, 50 todos loaded") {
		t.Fatalf("demo did not report the load:\n%s", out.String())
	}
	// The demo serves Sync Streams and says how to subscribe to a list
	// of its user's.
	if !regexp.MustCompile(`"stream":"list_todos","params":\{"list_id":"[0-9a-f-]{36}"\}`).MatchString(out.String()) {
		t.Fatalf("demo did not print how to subscribe to one of its user's lists:\n%s", out.String())
	}
	if dir == "" {
		t.Fatalf("demo did not print its data dir:\n%s", out.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("cluster dir %s still exists after stop (stat err %v)", dir, err)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	var stderr strings.Builder
	if code := Main(context.Background(), []string{"frobnicate"}, io.Discard, &stderr); code != ExitUsage {
		t.Fatalf("exit code %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) {
		t.Fatalf("stderr = %q", stderr.String())
	}
}
