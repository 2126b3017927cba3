package main

import (
	"flag"
	"os"
	"time"

	"github.com/syncpipe/syncpipe/benchmarks"
)

// drainBaselineTimeout bounds one OR-chain drain: its cost grows with the
// square of the bucket size, and the comparison is clear long before a
// 1M-op drain of it would end.
const drainBaselineTimeout = 2 * time.Minute

// drainOptions maps the command line onto the P4 drain scenario. Unlike
// the registered scenarios it defaults to the full SPEC sizes; -scale
// small (10k and 100k todos) runs in about a minute, and -rows / -lists,
// when given, measure that one size.
func drainOptions(runs, rows, lists int) benchmarks.DrainOptions {
	opt := benchmarks.DrainOptions{Runs: runs, BaselineTimeout: drainBaselineTimeout, Log: os.Stderr}
	set := map[string]string{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	if set["scale"] == "small" {
		opt.Todos = benchmarks.SmallDrain
	}
	if _, ok := set["rows"]; ok {
		opt.Todos = []int{rows}
	}
	if _, ok := set["lists"]; ok {
		opt.Lists = []int{lists}
	}
	return opt
}
