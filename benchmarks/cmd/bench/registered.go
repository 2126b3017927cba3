package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/syncpipe/syncpipe/benchmarks"
	"github.com/syncpipe/syncpipe/internal/testkit/gitbuild"
)

// Flags of the registered scenarios (see benchmarks.Scenarios); the knobs
// shared with the older switch (-rows, -lists, -runs, -writers, -batch)
// override a scale's preset only when given.
var (
	scale    = flag.String("scale", "small", "data set sizes: small (whole set in minutes) or full (SPEC §9 sizes)")
	trace    = flag.String("trace", "none", "export the syncpipe process's OTel spans: none, stdout or otlp (endpoint from OTEL_EXPORTER_OTLP_ENDPOINT)")
	syncpipe = flag.String("syncpipe", "", "syncpipe binary to run; empty builds ./cmd/syncpipe into a temp dir")
	cpuProf  = flag.String("cpuprofile", "", "directory for a Go CPU profile of every syncpipe child (`go tool pprof -top DIR/FILE`)")
	topology = flag.String("topology", "both", "streaming (P3), idle (P0) and scale: where storage is — both (two clusters and one, same runs), two (storage on a cluster of its own) or one (source and storage: two databases of one cluster)")
	compare  = flag.String("compare-bin", "", "a second syncpipe binary (e.g. a build of the previous commit): idle (P0), snapshot (P1), streaming (P3), drain (P4: its LATERAL drains), load and scale run every syncpipe configuration with both, interleaved, and print medians and new/old ratios")
	compRev  = flag.String("compare-rev", "", "like -compare-bin, with the binary built from this git revision (git archive into a temp dir; the working tree is not touched)")
	loadFor  = flag.Duration("for", 0, "load: how long the changes arrive (small 20s, full 2m); compaction-load and idle: each phase (compaction-load small 15s, full 1m; idle small 10s, full 1m); scale: the lag measurement (small 10s, full 30s); default: scale preset")
	procs    = flag.String("processes", "2,3", "scaling (P2): comma-separated counts of syncpipe processes, 1 worker each, measured next to the single-process -writers configurations")
	sizes    = flag.String("sizes", "", "scale: comma-separated todo counts to compare, e.g. 100000,1000000 (default: small 100k and 1M, full 1M and 10M)")
)

// flagged are the scenarios whose options this command builds from flags
// of their own (drain.go, checksums_flags.go) rather than from Params.
var flagged = map[string]func(context.Context, *benchmarks.Harness) (benchmarks.Result, error){
	"drain": func(ctx context.Context, h *benchmarks.Harness) (benchmarks.Result, error) {
		opt := drainOptions(intFlag("runs"), intFlag("rows"), intFlag("lists"))
		opt.Harness = h
		if *scale == "small" && !isSet("rows") {
			opt.Todos = benchmarks.SmallDrain // -scale defaults to small here too
		}
		if *scale == "small" {
			// The OR-chain baseline is quadratic: at small scale a short
			// cut-off keeps `task bench` within minutes.
			opt.BaselineTimeout = benchmarks.SmallDrainBaselineTimeout
		}
		return benchmarks.RunDrain(ctx, opt)
	},
	"checksums": func(ctx context.Context, h *benchmarks.Harness) (benchmarks.Result, error) {
		opt := checksumsOptions()
		opt.Harness = h
		return benchmarks.RunChecksums(ctx, opt)
	},
}

// runRegistered runs one registered scenario, or all of them, saves each
// result (markdown, JSON, SVG) and for "all" the bar summary. It returns
// the exit code.
func runRegistered(ctx context.Context, name string, workers []int, out string) int {
	var list []benchmarks.Scenario
	if name == "all" {
		list = benchmarks.Scenarios()
	} else {
		for _, n := range strings.Split(name, ",") {
			s, _ := benchmarks.Lookup(n)
			list = append(list, s)
		}
	}
	topologies, err := benchmarks.ParseTopologies(*topology)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: -topology: %v\n", err)
		return 2
	}
	if *compare != "" && *compRev != "" {
		fmt.Fprintln(os.Stderr, "bench: -compare-bin and -compare-rev exclude each other")
		return 2
	}
	switch *trace {
	case "none", "stdout", "otlp":
	default:
		fmt.Fprintf(os.Stderr, "bench: bad -trace %q: want none, stdout or otlp\n", *trace)
		return 2
	}
	dir, err := os.MkdirTemp("", "syncpipe-bench-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	h := &benchmarks.Harness{Syncpipe: *syncpipe, Dir: dir, Trace: *trace, TraceOut: io.Discard, CPUProfileDir: *cpuProf, Compare: *compare}
	if *cpuProf != "" {
		if err := os.MkdirAll(*cpuProf, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -cpuprofile: %v\n", err)
			return 1
		}
	}
	if *trace == "stdout" {
		h.TraceOut = os.Stdout
	}
	if h.Syncpipe == "" {
		fmt.Fprintln(os.Stderr, "building syncpipe…")
		if h.Syncpipe, err = benchmarks.BuildSyncpipe(ctx, dir, false); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
	}
	if *compRev != "" {
		fmt.Fprintf(os.Stderr, "building syncpipe at %s…\n", *compRev)
		if h.Compare, err = gitbuild.Syncpipe(ctx, "", dir, *compRev); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
	}
	if h.Compare != "" {
		fmt.Fprintf(os.Stderr, "comparing %s (new) with %s (old)\n", h.Syncpipe, h.Compare)
	}
	p := benchmarks.Params{Scale: *scale, Runs: setInt("runs"), ChunkRows: setInt("batch"),
		Rows: setInt("rows"), Lists: setInt("lists"), Topologies: topologies, For: *loadFor, Log: os.Stderr, Harness: h}
	if isSet("writers") {
		p.Workers = workers
	}
	if isSet("processes") {
		if p.Processes, err = positiveInts(*procs); err != nil {
			fmt.Fprintf(os.Stderr, "bench: bad -processes %q\n", *procs)
			return 2
		}
	}
	if isSet("sizes") {
		if p.Sizes, err = positiveInts(*sizes); err != nil {
			fmt.Fprintf(os.Stderr, "bench: bad -sizes %q\n", *sizes)
			return 2
		}
	}
	report := io.Writer(os.Stdout)
	if *trace == "stdout" {
		report = os.Stderr // stdout carries the spans
	}
	var results []benchmarks.Result
	code := 0
	for _, s := range list {
		fmt.Fprintf(os.Stderr, "== %s (%s scale)\n", s.Name, *scale)
		began := time.Now()
		run := func(ctx context.Context) (benchmarks.Result, error) { return s.Run(ctx, p) }
		if f, ok := flagged[s.Name]; ok {
			run = func(ctx context.Context) (benchmarks.Result, error) { return f(ctx, h) }
		}
		res, err := run(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.Name, err)
			code = 1
			if ctx.Err() != nil {
				break
			}
			continue
		}
		res.Params += fmt.Sprintf("; scale %s", *scale)
		fmt.Fprintf(os.Stderr, "== %s done in %v\n", s.Name, time.Since(began).Round(time.Second))
		res.WriteMarkdown(report)
		if err := res.Save(out); err != nil {
			fmt.Fprintf(os.Stderr, "bench: save results: %v\n", err)
			return 1
		}
		results = append(results, res)
	}
	if name == "all" {
		if err := benchmarks.WriteSummary(out, *scale, results); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
	}
	return code
}

// isSet reports whether the flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// setInt is an int flag's value if given, else 0 (the scale's preset).
func setInt(name string) int {
	if !isSet(name) {
		return 0
	}
	n, _ := strconv.Atoi(flag.Lookup(name).Value.String())
	return n
}

// intFlag is an int flag's value, given or default.
func intFlag(name string) int {
	n, _ := strconv.Atoi(flag.Lookup(name).Value.String())
	return n
}

// positiveInts reads a comma-separated list of positive integers.
func positiveInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("not a positive integer: %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
