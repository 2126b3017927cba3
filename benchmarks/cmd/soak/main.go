// Command soak runs the torture harness (internal/testkit/torture) for many fault
// trials, then the load scenario (1,000 sync clients + 5k changes/s) for
// ten minutes, and writes both summaries to benchmarks/results/soak.md:
// the same test CI runs with 20 trials, here with more trials and larger
// transactions, on throwaway PostgreSQL clusters.
//
//	go run ./benchmarks/cmd/soak -trials 200
//	go run ./benchmarks/cmd/soak -trials 50 -seed 42 -faults kill,pause -load-for 0
//	go run ./benchmarks/cmd/soak -trials 100 -race
//
// The trials are `go test ./internal/testkit/torture -run TestTortureFaultTrials`
// with the harness's environment knobs set; the test's log (every trial,
// then a summary: trials per fault kind, rows and ops verified, recovery
// times) goes to stdout. The exit code is go test's, else 1 if the load
// failed or missed its bar.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/syncpipe/syncpipe/benchmarks"
)

func main() {
	trials := flag.Int("trials", 200, "fault trials to run (0: none)")
	seed := flag.Uint64("seed", 0, "random seed (0: from the clock; each run prints the seed it used)")
	large := flag.Int("large", 50000, "rows of each large transaction")
	faults := flag.String("faults", "", "comma-separated fault kinds (kill, pause, cut-storage, cut-source, stall-storage, stall-source, readonly, restart-storage, restart-source); empty: all")
	race := flag.Bool("race", false, "build the test and the syncpipe children with the race detector")
	bin := flag.String("bin", "", "a built syncpipe binary for the children (default: the test binary acting as syncpipe)")
	loadFor := flag.Duration("load-for", 10*time.Minute, "how long the load scenario's changes arrive (0: no load run)")
	out := flag.String("out", "benchmarks/results", "directory for soak.md (empty: not written)")
	flag.Parse()
	if *trials < 0 || *large < 1 || *loadFor < 0 {
		fmt.Fprintln(os.Stderr, "soak: -trials, -large and -load-for must not be negative")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	var report strings.Builder
	fmt.Fprintf(&report, "# Soak — %s\n\n`go run ./benchmarks/cmd/soak %s`\n", start.UTC().Format("2006-01-02 15:04 MST"), strings.Join(os.Args[1:], " "))

	code := 0
	if *trials > 0 {
		code = runTrials(ctx, &report, *trials, *large, *seed, *faults, *bin, *race)
	}
	if *loadFor > 0 && ctx.Err() == nil {
		if err := runLoad(ctx, &report, *loadFor); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			code = max(code, 1)
		}
	}
	fmt.Fprintf(&report, "\nWhole soak: %s.\n", time.Since(start).Round(time.Second))
	if *out != "" {
		err := os.MkdirAll(*out, 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(*out, "soak.md"), []byte(report.String()), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak: write the summary:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// runTrials runs the torture test and adds its seed and summary to report;
// it returns go test's exit code.
func runTrials(ctx context.Context, report *strings.Builder, trials, large int, seed uint64, faults, bin string, race bool) int {
	// The test's own budget is 3 min + 45 s a trial; go test's timeout
	// leaves room over it.
	timeout := 13*time.Minute + time.Duration(trials)*45*time.Second
	args := []string{"test", "-count=1", "-v", "-run", "^TestTortureFaultTrials$", "-timeout", timeout.String()}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "./internal/testkit/torture")
	cmd := exec.CommandContext(ctx, "go", args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(os.Stdout, &log), os.Stderr
	cmd.Env = append(os.Environ(),
		"SYNCPIPE_TORTURE_TRIALS="+strconv.Itoa(trials),
		"SYNCPIPE_TORTURE_LARGE_ROWS="+strconv.Itoa(large))
	if seed != 0 {
		cmd.Env = append(cmd.Env, "SYNCPIPE_TORTURE_SEED="+strconv.FormatUint(seed, 10))
	}
	if faults != "" {
		cmd.Env = append(cmd.Env, "SYNCPIPE_TORTURE_FAULTS="+faults)
	}
	if bin != "" {
		cmd.Env = append(cmd.Env, "SYNCPIPE_TORTURE_BIN="+bin)
	}
	fmt.Printf("soak: go %v (%d trials, large transactions of %d rows)\n", args, trials, large)
	began := time.Now()
	code := 0
	if err := cmd.Run(); err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	fmt.Fprintf(report, "\n## Fault trials\n\n%d trials requested, large transactions of %d rows; go test exit code %d after %s.\n\n```\n%s```\n",
		trials, large, code, time.Since(began).Round(time.Second), trialSummary(log.String()))
	return code
}

// trialSummary picks the seed line, any failure and the summary block out
// of the test's verbose log.
func trialSummary(log string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(log, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.Contains(t, "torture summary:"):
			in = true
		case strings.Contains(t, ": seed ") && strings.Contains(t, "replays the choices"),
			strings.Contains(t, "FAILED"), strings.HasPrefix(t, "--- FAIL"), strings.HasPrefix(t, "--- PASS"):
		case in && strings.HasPrefix(line, "        "):
		default:
			in = false
			continue
		}
		b.WriteString(t + "\n")
	}
	return b.String()
}

// runLoad runs the load scenario's soak preset with a fresh syncpipe build
// and adds its report to report; a missed bar is an error.
func runLoad(ctx context.Context, report *strings.Builder, d time.Duration) error {
	dir, err := os.MkdirTemp("", "syncpipe-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := benchmarks.BuildSyncpipe(ctx, dir, false)
	if err != nil {
		return err
	}
	opt := benchmarks.LoadPreset("soak")
	opt.For, opt.Log, opt.Harness = d, os.Stderr, &benchmarks.Harness{Syncpipe: bin, Dir: dir}
	res, err := benchmarks.RunLoad(ctx, opt)
	report.WriteString("\n## Load\n\n")
	if err != nil {
		fmt.Fprintf(report, "Failed: %v\n", err)
		return fmt.Errorf("load: %w", err)
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	report.WriteString(strings.TrimPrefix(md.String(), "## "))
	fmt.Print(md.String())
	for _, b := range res.Bars {
		if !b.Met {
			return fmt.Errorf("load bar not met: %s", b.Value)
		}
	}
	return nil
}
