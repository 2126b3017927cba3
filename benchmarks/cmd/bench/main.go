// Command bench runs syncpipe's performance scenarios (SPEC §9) on a
// throwaway PostgreSQL cluster and writes markdown and JSON reports to
// benchmarks/results.
//
//	go run ./benchmarks/cmd/bench -scenario write -rows 1000000
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
	scenario := flag.String("scenario", "write", "scenario to run: write (storage write path) or snapshot (SPEC §9 P1)")
	rows := flag.Int("rows", 1_000_000, "source rows (todos)")
	lists := flag.Int("lists", 1000, "todo lists (by_list buckets)")
	runs := flag.Int("runs", 3, "runs per configuration; the median is reported")
	writers := flag.String("writers", "1,2", "comma-separated writer counts (write) or workers_per_process values (snapshot)")
	batch := flag.Int("batch", 10000, "rows per write transaction (chunk_rows)")
	out := flag.String("out", "benchmarks/results", "directory for <scenario>.md and .json")
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
	var res benchmarks.Result
	var err error
	switch *scenario {
	case "snapshot":
		res, err = benchmarks.RunSnapshot(ctx, benchmarks.SnapshotOptions{
			Todos: *rows, Lists: *lists, Workers: ws, ChunkRows: *batch, Runs: *runs, Log: os.Stderr})
	case "write":
		res, err = benchmarks.RunWrite(ctx, benchmarks.WriteOptions{
			Rows: *rows, Lists: *lists, BatchRows: *batch, Writers: ws, Runs: *runs, Log: os.Stderr})
	default:
		fmt.Fprintf(os.Stderr, "bench: unknown scenario %q\n", *scenario)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	res.WriteMarkdown(os.Stdout)
	if err := res.Save(*out); err != nil {
		fmt.Fprintf(os.Stderr, "bench: save results: %v\n", err)
		os.Exit(1)
	}
}
