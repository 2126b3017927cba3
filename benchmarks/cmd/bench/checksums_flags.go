package main

import (
	"flag"
	"os"

	"github.com/syncpipe/syncpipe/benchmarks"
)

// Flags of the checksums scenario (SPEC §9 P5); zero keeps the -scale
// preset (benchmarks.ChecksumsPreset), and -rows, when given, sets the
// global bucket's rows.
var (
	p5Clients  = flag.Int("clients", 0, "checksums: connected clients, one user each (0: scale preset; full 100)")
	p5Lists    = flag.Int("lists-per-user", 0, "checksums: small buckets per user (0: scale preset, 400)")
	p5Ticks    = flag.Int("ticks", 0, "checksums: measured incremental checkpoints per mode (0: scale preset)")
	p5Interval = flag.Duration("interval", 0, "checksums: time between updates (0: scale preset, 1s)")
	p5RowBytes = flag.Int("row-bytes", 0, "checksums: size of a global bucket row (0: scale preset, 1 KB)")
)

// checksumsOptions applies the flags to the preset of -scale.
func checksumsOptions() benchmarks.ChecksumsOptions {
	o := benchmarks.ChecksumsPreset(*scale)
	if n := setInt("rows"); n > 0 {
		o.GlobalRows = n
	}
	set := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	set(&o.Clients, *p5Clients)
	set(&o.ListsPerUser, *p5Lists)
	set(&o.Ticks, *p5Ticks)
	set(&o.RowBytes, *p5RowBytes)
	if *p5Interval > 0 {
		o.Interval = *p5Interval
	}
	o.Log = os.Stderr
	return o
}
