package benchmarks

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestDrainSmoke runs the P4 drain at a tiny scale (one run each of two
// data sets) and checks what the client received: every op of every
// bucket, for both query shapes (LATERAL from a `syncpipe run --role api`
// child, OR-chain in-process), a bar line for the tenfold step, the
// child's peak RSS and the server's CPU of the NDJSON, BSON+zstd and WebSocket drains
// (the child's and the storage cluster's; none for the in-process server,
// whose process is the client's too). No timing is asserted: CI machines
// vary.
func TestDrainSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 3*time.Minute)
	var log strings.Builder
	res, err := RunDrain(ctx, DrainOptions{Todos: []int{200, 2000}, Lists: []int{20}, Runs: 1, Log: &log,
		NewDatabase: func(context.Context, string) (string, error) { return pgtest.NewDB(t), nil },
		Harness:     h})
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Log(log.String())
	want := map[string]int64{}
	for _, n := range []int{200, 2000} {
		for _, name := range []string{"LATERAL", "LATERAL, BSON+zstd", "OR-chain", "LATERAL, WebSocket", "LATERAL, WebSocket+deflate"} {
			want[drainRowName(n, 20, name)] = int64(n + 20) // by_list ops + one global op per list
		}
	}
	if len(res.Rows) != len(want) {
		t.Fatalf("rows %v, want %d", res.Rows, len(want))
	}
	for _, r := range res.Rows {
		w, ok := want[r.Name]
		if !ok || len(r.Samples) != 1 || r.Samples[0].Ops != w || r.Samples[0].Bytes == 0 {
			t.Errorf("row %q: %+v, want one sample with %d ops", r.Name, r.Samples, w)
		}
		if strings.HasSuffix(r.Name, "LATERAL") && !strings.HasSuffix(r.Baseline, "OR-chain") {
			t.Errorf("row %q: baseline %q", r.Name, r.Baseline)
		}
		if (strings.HasSuffix(r.Name, "BSON+zstd") || strings.Contains(r.Name, "WebSocket")) && !strings.HasSuffix(r.Baseline, "LATERAL") {
			t.Errorf("row %q: baseline %q, want the NDJSON drain", r.Name, r.Baseline)
		}
		for _, s := range r.Samples {
			lateral := strings.Contains(r.Name, "LATERAL")
			if lateral && s.SyncpipeCPU <= 0 {
				t.Errorf("row %q: no CPU of the sync API child: %+v", r.Name, s)
			}
			if !lateral && s.SyncpipeCPU != 0 {
				t.Errorf("row %q: the in-process server's CPU is the client's too, yet reported: %+v", r.Name, s)
			}
			// A server named by the environment may be on another machine.
			if os.Getenv(pgtest.EnvURL) == "" && s.PostgresCPU <= 0 {
				t.Errorf("row %q: no CPU of the storage cluster: %+v", r.Name, s)
			}
		}
	}
	if len(res.Bars) != 1 || res.Bars[0].ID != "P4" || !strings.Contains(res.Bars[0].Value, "200 → 2k todos") {
		t.Errorf("bars %+v", res.Bars)
	}
	if res.PeakRSS <= 0 {
		t.Errorf("no peak RSS of the sync API child")
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "of 2k todos / 20 lists, OR-chain") || !strings.Contains(md.String(), "as BSON with zstd") {
		t.Errorf("report lacks the baseline ratio:\n%s", md.String())
	}
	for _, want := range []string{"| 2k todos / 20 lists | NDJSON + identity |", "| 2k todos / 20 lists | BSON + zstd |",
		"| 2k todos / 20 lists | BSON over WebSocket |", "as BSON over WebSocket, without compression",
		"| 2k todos / 20 lists | BSON over WebSocket, deflate |", "as BSON over WebSocket, with per-message deflate",
		"server CPU s (syncpipe / storage)", "Server CPU (median; syncpipe / storage)"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
}

// TestDrainCompareSmoke runs the drain as a comparison run at the
// smallest scale, the old binary being the new one: the LATERAL drains
// (NDJSON and BSON+zstd) are measured by both API children, the OR-chain
// baseline once, and the report's comparison table has a ratio for each
// row measured twice.
func TestDrainCompareSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 3*time.Minute)
	h.Compare = h.Syncpipe
	var log strings.Builder
	res, err := RunDrain(ctx, DrainOptions{Todos: []int{200}, Lists: []int{20}, Runs: 1, Log: &log,
		NewDatabase: func(context.Context, string) (string, error) { return pgtest.NewDB(t), nil },
		Harness:     h})
	if err != nil {
		t.Fatalf("%v\nlog:\n%s", err, log.String())
	}
	t.Log(log.String())
	var names []string
	for _, r := range res.Rows {
		names = append(names, r.Name)
		if len(r.Samples) != 1 || r.Samples[0].Ops != 220 {
			t.Errorf("row %q: %+v, want one sample of 220 ops", r.Name, r.Samples)
		}
	}
	lateral, bson := drainRowName(200, 20, "LATERAL"), drainRowName(200, 20, "LATERAL, BSON+zstd")
	// WebSocket is drained by the new build only: an earlier one may not
	// serve it.
	ws, wsd := drainRowName(200, 20, "LATERAL, WebSocket"), drainRowName(200, 20, "LATERAL, WebSocket+deflate")
	want := []string{lateral, lateral + compareSuffix, bson, bson + compareSuffix, ws, wsd, drainRowName(200, 20, "OR-chain")}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows %q, want %q", names, want)
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "New build vs old build") {
		t.Fatalf("report lacks the comparison table:\n%s", md.String())
	}
	for _, name := range []string{lateral, bson} {
		if !regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(name) + ` \| .* \| \*\*\d+\.\d{3}\*\* \| \d+\.\d{3} \|$`).MatchString(md.String()) {
			t.Errorf("comparison table lacks a ratio for %q:\n%s", name, md.String())
		}
	}
	if !strings.Contains(res.Params, "comparison run") {
		t.Errorf("params do not say it is a comparison run: %s", res.Params)
	}
}
