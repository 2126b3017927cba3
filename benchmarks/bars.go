package benchmarks

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Bar is one SPEC §9 bar and whether this run met it.
type Bar struct {
	ID      string `json:"id"` // P1 … P6
	Measure string `json:"measure"`
	Bar     string `json:"bar"`
	Value   string `json:"value"` // what was measured, in words and figures
	Met     bool   `json:"met"`
	// Note says why, when that is not obvious: for a bar not met, where the
	// stage breakdown puts the time.
	Note string `json:"note,omitempty"`
}

// RSSBar is SPEC §9 P6: the syncpipe process stays below 500 MB.
const RSSBar = 500_000_000

// specBars lists every SPEC §9 bar, for the summary of `-scenario all`.
var specBars = []struct{ id, scenario, measure, bar string }{
	{"P0", "idle", "a caught-up syncpipe, no source change, then one write a second, two topologies (issue 40)", "idle: storage commits by syncpipe ≤ 1/s, syncpipe CPU < 5% of a core; the slot's confirmed_flush_lsn advances"},
	{"P1", "snapshot", "snapshot of 1M todos / 1k lists", "≥ 60% of the raw COPY→COPY ceiling; ≥ 5× PowerSync (≥ 30k rows/s)"},
	{"P2", "scaling", "snapshot of 200 tables × 20k rows by 1 process × {1, 2} workers and {2, 3} processes × 1 worker (issue 16: what 2 cores can show)", "N processes × 1 worker ≥ 90% of 1 process × N workers; lease statements < 1% of storage statements; takeover after SIGKILL ≤ lease + 5 s; no chunk re-read on resume"},
	{"P3", "streaming", "200k single-row updates in 1k-row txns, two topologies", "≥ 95% of storage's own statement ceiling (decode + probe + op insert) in the same run, two clusters (SPEC §9 P3 restated); lag p99 < 100 ms at 5k changes/s"},
	{"P3-large", "streaming", "one 1M-row source transaction", "≥ 50% of the 1k-row-txn rate; RSS < 500 MB"},
	{"P4", "drain", "bucket drain, {10k,100k,1M} todos × {200,1k} buckets", "1M/1k ≤ 12 s; 10× ops ⇒ ≤ 11× time"},
	{"P5", "checksums", "checksums, 100 clients, small updates", "≤ 1 checksum query per changed bucket per checkpoint; p99 < 50 ms"},
	{"P5-streams", "checksums-streams", "checksums on Sync Streams, 100 clients × 10 subscriptions, small updates", "≤ 1 checksum query per changed bucket per checkpoint; p99 < 50 ms"},
	{"Load", "load", "1,000 sync connections + 5k changes/s", "commit → checkpoint_complete p99 < 100 ms; RSS < 500 MB; < 50 KB per idle connection"},
	{"Load (WebSocket)", "load-ws", "1,000 sync connections over WebSocket (RSocket) + 5k changes/s (issue 43)", "commit → checkpoint_complete p99 < 100 ms; RSS < 500 MB; < 50 KB per idle connection"},
	{"Scale", "scale", "issue 47: P1, P3 and P4 at the largest data set size against the smallest, both topologies", "P1 ≥ 80% and P3 1k-row-txn throughput ≥ 80%, P4 ≥ 90% of the smallest size's; one cluster: snapshot done → first checkpoint ≤ 10 s; lag p99 < 250 ms at 5k changes/s; ≤ 504 storage bytes per source row"},
	{"P6", "", "memory (syncpipe process)", "RSS < 500 MB through P1–P5 and one 1M-row source transaction"},
}

// writeExtras renders bars, peak RSS and the stage breakdown of a result.
func (res Result) writeExtras(w io.Writer) {
	if len(res.Bars) > 0 {
		fmt.Fprintln(w, "\n| bar | measure | target | measured | verdict |")
		fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
		for _, b := range res.Bars {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", b.ID, b.Measure, b.Bar, b.Value, verdict(b))
		}
	}
	if res.PeakRSS > 0 {
		met := "met"
		if res.PeakRSS >= RSSBar {
			met = "**NOT met**"
		}
		fmt.Fprintf(w, "\nPeak RSS of the syncpipe process (a child `syncpipe run`, apart from the harness): %s — P6 bar < 500 MB %s.\n",
			res.peakDetail(), met)
	}
	if res.Stages != nil && len(res.Stages.Stages) > 0 {
		var sb strings.Builder
		_ = res.Stages.WriteTable(&sb)
		of := res.StagesOf
		if of == "" {
			of = "over all syncpipe runs"
		}
		fmt.Fprintf(w, "\nStage-time summary %s (busiest stage per worker: **%s**):\n\n```\n%s```\n",
			of, res.Stages.Busiest(), sb.String())
	}
}

func verdict(b Bar) string {
	v := "met"
	if !b.Met {
		v = "**NOT met**"
	}
	if b.Note != "" {
		v += " — " + b.Note
	}
	return v
}

func (r Row) cpuBusy() string {
	m := r.Median()
	if m.CPUBusy == 0 {
		return "—"
	}
	own := "—"
	if m.OwnCPU > 0 {
		own = fmt.Sprintf("%.2f", m.OwnCPU.Seconds()/m.Duration.Seconds())
	}
	return fmt.Sprintf("%s / %.0f%%", own, 100*m.CPUBusy)
}

func (r Row) peakRSS() string {
	var peak int64
	for _, s := range r.Samples {
		peak = max(peak, s.PeakRSS)
	}
	if peak == 0 {
		return "—"
	}
	return fmtBytes(peak)
}

// peakDetail names the highest peak RSS and the configuration it came
// from, e.g. "789 MB (syncpipe, 4 worker(s))".
func (res Result) peakDetail() string {
	name, peak := "", int64(0)
	for _, r := range res.Rows {
		for _, s := range r.Samples {
			if s.PeakRSS > peak {
				name, peak = r.Name, s.PeakRSS
			}
		}
	}
	if peak < res.PeakRSS || name == "" { // the peak came from outside the table (e.g. a resume check)
		return fmtBytes(res.PeakRSS)
	}
	return fmt.Sprintf("%s (%s)", fmtBytes(peak), name)
}

func fmtBytes(n int64) string {
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}

// cpuTimes are the machine's CPU counters from /proc/stat, in ticks.
type cpuTimes struct{ busy, total uint64 }

// readCPU samples the machine-wide CPU counters; zero if unavailable.
func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t
}

// busySince is the busy share of CPU time between two samples.
func busySince(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total)
}

// WriteSummary writes summary.md under dir: every SPEC §9 bar with its
// verdict from the results of this run (at the given scale), or "not
// measured".
func WriteSummary(dir, scale string, results []Result) error {
	byScenario := map[string]Result{}
	for _, r := range results {
		byScenario[r.Scenario] = r
	}
	var b strings.Builder
	date := "—"
	if len(results) > 0 {
		date = results[0].Date.Format("2006-01-02 15:04 MST")
	}
	fmt.Fprintf(&b, "## SPEC §9 bars — %s, %s scale\n\n", date, scale)
	if scale != "full" {
		fmt.Fprint(&b, "The bars are set for the SPEC sizes; at a smaller scale the verdicts are indicative only.\n\n")
	}
	fmt.Fprintln(&b, "| bar | measure | target | measured | verdict | details |")
	fmt.Fprintln(&b, "| --- | --- | --- | --- | --- | --- |")
	var peak int64
	var peakOf []string
	counted := map[string]bool{}
	for _, sb := range specBars {
		if sb.id == "P6" || counted[sb.scenario] {
			continue
		}
		counted[sb.scenario] = true
		if r, ok := byScenario[sb.scenario]; ok && r.PeakRSS > 0 {
			peak = max(peak, r.PeakRSS)
			peakOf = append(peakOf, fmt.Sprintf("%s %s", sb.id, r.peakDetail()))
		}
	}
	for _, sb := range specBars {
		link := "—"
		if sb.scenario != "" {
			if _, ok := byScenario[sb.scenario]; ok {
				link = fmt.Sprintf("[%s.md](%s.md)", sb.scenario, sb.scenario)
			}
		}
		var found []Bar
		for _, r := range results {
			for _, bar := range r.Bars {
				if bar.ID == sb.id {
					found = append(found, bar)
				}
			}
		}
		switch {
		case sb.id == "P6" && peak > 0:
			found = append(found, Bar{Value: "peak " + strings.Join(peakOf, ", "), Met: peak < RSSBar,
				Note: fmt.Sprintf("measured in %d of %d scenarios", len(peakOf), len(counted))})
		case len(found) == 0:
			fmt.Fprintf(&b, "| %s | %s | %s | — | not measured | %s |\n", sb.id, sb.measure, sb.bar, link)
			continue
		}
		for _, bar := range found {
			target := sb.bar
			if bar.Bar != "" {
				target = bar.Bar
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", sb.id, sb.measure, target, bar.Value, verdict(bar), link)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}
