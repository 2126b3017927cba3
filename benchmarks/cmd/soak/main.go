// Command soak runs the torture harness (internal/torture) for many fault
// trials: the same test CI runs with 20 trials, here with more trials and
// larger transactions, on a throwaway PostgreSQL cluster.
//
//	go run ./benchmarks/cmd/soak -trials 200
//	go run ./benchmarks/cmd/soak -trials 50 -seed 42 -faults kill,pause
//	go run ./benchmarks/cmd/soak -trials 100 -race
//
// It is a thin wrapper over `go test ./internal/torture -run
// TestTortureFaultTrials` with the harness's environment knobs set; the
// test's log (every trial, then a summary: trials per fault kind, rows and
// ops verified, recovery times) goes to stdout. The exit code is go test's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"time"
)

func main() {
	trials := flag.Int("trials", 200, "fault trials to run")
	seed := flag.Uint64("seed", 0, "random seed (0: from the clock; each run prints the seed it used)")
	large := flag.Int("large", 50000, "rows of each large transaction")
	faults := flag.String("faults", "", "comma-separated fault kinds (kill, pause, cut-storage, cut-source, stall-storage, stall-source, readonly); empty: all")
	race := flag.Bool("race", false, "build the test and the syncpipe children with the race detector")
	bin := flag.String("bin", "", "a built syncpipe binary for the children (default: the test binary acting as syncpipe)")
	flag.Parse()
	if *trials < 1 || *large < 1 {
		fmt.Fprintln(os.Stderr, "soak: -trials and -large must be positive")
		os.Exit(2)
	}

	// The test's own budget is 3 min + 45 s a trial; go test's timeout
	// leaves room over it.
	timeout := 13*time.Minute + time.Duration(*trials)*45*time.Second
	args := []string{"test", "-count=1", "-v", "-run", "^TestTortureFaultTrials$", "-timeout", timeout.String()}
	if *race {
		args = append(args, "-race")
	}
	args = append(args, "./internal/torture")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"SYNCPIPE_TORTURE_TRIALS="+strconv.Itoa(*trials),
		"SYNCPIPE_TORTURE_LARGE_ROWS="+strconv.Itoa(*large))
	if *seed != 0 {
		cmd.Env = append(cmd.Env, "SYNCPIPE_TORTURE_SEED="+strconv.FormatUint(*seed, 10))
	}
	if *faults != "" {
		cmd.Env = append(cmd.Env, "SYNCPIPE_TORTURE_FAULTS="+*faults)
	}
	if *bin != "" {
		cmd.Env = append(cmd.Env, "SYNCPIPE_TORTURE_BIN="+*bin)
	}
	fmt.Printf("soak: go %v (%d trials, large transactions of %d rows)\n", args, *trials, *large)
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}
