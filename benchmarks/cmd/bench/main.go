// Command bench runs syncpipe's performance scenarios (SPEC §9) on a
// throwaway PostgreSQL cluster and writes markdown and JSON reports to
// benchmarks/results: <scenario>.md, .json and .svg per scenario, and with
// -scenario all a summary.md of every SPEC §9 bar.
//
//	go run ./benchmarks/cmd/bench -scenario all -scale small
//	go run ./benchmarks/cmd/bench -scenario snapshot -scale full -trace stdout
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/syncpipe/syncpipe/benchmarks"
)

func main() {
	scenario := flag.String("scenario", "all", "scenario to run: all, idle (P0: a caught-up syncpipe with no source change), snapshot (P1), scaling (P2), streaming (P3), drain (P4), checksums (P5), load (1,000 sync connections + 5k changes/s), load-ws (the same over WebSocket), compaction (P8: storage and a new client's drain before and after compaction), compaction-load (P8: replication lag and checksums while compaction runs), scale (issue 47: P1, P3 and P4 at two data set sizes, -sizes) or write (storage write path), or a comma-separated list of them (snapshot,streaming); summary re-renders the saved results in -out (markdown, charts) and their summary.md")
	// Given on the command line, these override the scenario's -scale
	// preset (registered.go reads them by name).
	flag.Int("rows", 0, "source rows: todos (snapshot, write, drain), rows per table (scaling), global bucket rows (checksums); default: scale preset")
	flag.Int("lists", 0, "todo lists (by_list buckets); default: scale preset")
	flag.Int("runs", 3, "runs per configuration; the median is reported")
	writers := flag.String("writers", "1,2", "comma-separated workers_per_process values (snapshot, scaling) or writer counts (write); default: scale preset")
	flag.Int("batch", 0, "chunk_rows (snapshot, scaling) or rows per write transaction (write); default: scale preset")
	out := flag.String("out", "benchmarks/results", "directory for <scenario>.md, .json and .svg")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var ws []int
	for _, f := range strings.Split(*writers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad -writers %q\n", *writers)
			os.Exit(2)
		}
		ws = append(ws, n)
	}
	if *scenario == "summary" {
		// Re-render every saved result (markdown, chart) and the summary.
		results, err := benchmarks.LoadResults(*out)
		for _, r := range results {
			if err == nil {
				err = r.Save(*out)
			}
		}
		if err == nil {
			err = benchmarks.WriteSummary(*out, scaleOf(results), results)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if *scenario != "all" {
		for _, name := range strings.Split(*scenario, ",") {
			if _, ok := benchmarks.Lookup(name); !ok {
				fmt.Fprintf(os.Stderr, "bench: unknown scenario %q\n", name)
				os.Exit(2)
			}
		}
	}
	code := runRegistered(ctx, *scenario, ws, *out)
	stop()
	os.Exit(code)
}

// scaleOf names the scale the saved results were measured at: the one
// their parameters state, "mixed" if they differ.
func scaleOf(results []benchmarks.Result) string {
	scale := ""
	for _, r := range results {
		i := strings.LastIndex(r.Params, "scale ")
		if i < 0 {
			continue // saved before scales existed
		}
		s := r.Params[i+len("scale "):]
		if scale != "" && s != scale {
			return "mixed"
		}
		scale = s
	}
	return scale
}
