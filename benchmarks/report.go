package benchmarks

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Sample is one measured run.
type Sample struct {
	Duration time.Duration `json:"duration_ns"`
	Rows     int64         `json:"rows"`
	Ops      int64         `json:"ops"`
	Bytes    int64         `json:"bytes"`
	// PeakRSS is the syncpipe process's peak RSS in bytes (0 = not measured,
	// e.g. a baseline without a syncpipe process).
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
	// CPUBusy is the share of the machine's CPU time that was busy during
	// the run (0..1): it tells whether more workers could have helped.
	CPUBusy float64 `json:"cpu_busy,omitempty"`
	// OwnCPU is the CPU time of the run's own processes (syncpipe or the
	// harness, plus the cluster's backends): OwnCPU/Duration is how many
	// of the machine's cores the run itself kept busy.
	OwnCPU time.Duration `json:"own_cpu_ns,omitempty"`
	// SyncpipeCPU and PostgresCPU split OwnCPU where a scenario measures
	// both apart (P2): the CPU time of every syncpipe process of the run,
	// and of the cluster's processes.
	SyncpipeCPU time.Duration `json:"syncpipe_cpu_ns,omitempty"`
	PostgresCPU time.Duration `json:"postgres_cpu_ns,omitempty"`
	// Statements are the statements storage executed during the run (P2;
	// nil = not counted).
	Statements *StatementCounts `json:"storage_statements,omitempty"`
	// GroupDone is, where it comes later than Duration (P2), the time
	// from the same start until the group's snapshot was marked done.
	GroupDone time.Duration `json:"group_done_ns,omitempty"`
}

// Row is one line of a result table: a configuration measured several times.
type Row struct {
	Name    string   `json:"name"`
	Samples []Sample `json:"samples"`
	// Baseline names the row this one is compared with ("" = none).
	Baseline string `json:"baseline,omitempty"`
	// Workers is the worker count of the configuration (0 = not a worker
	// series); rows with one are drawn as throughput vs workers.
	Workers int `json:"workers,omitempty"`
	// Processes is the number of syncpipe processes sharing the work
	// (0 = one); the chart draws several-process rows as a series of their
	// own, against their workers in all.
	Processes int `json:"processes,omitempty"`
}

// Median returns the sample with the median duration.
func (r Row) Median() Sample {
	s := slices.Clone(r.Samples)
	slices.SortFunc(s, func(a, b Sample) int { return int(a.Duration - b.Duration) })
	return s[len(s)/2]
}

// rate returns per-second throughputs of rows over the samples: median
// (of an even count, the mean of the middle two), min and max.
func (r Row) rate(f func(Sample) int64) (med, lo, hi float64) {
	var rs []float64
	for _, s := range r.Samples {
		rs = append(rs, float64(f(s))/s.Duration.Seconds())
	}
	slices.Sort(rs)
	return median(rs), rs[0], rs[len(rs)-1]
}

// rowSet collects samples into rows in the order configurations first
// appear.
type rowSet struct {
	byName map[string]*Row
	order  []string
}

func (rs *rowSet) add(name, baseline string, s Sample) {
	if rs.byName == nil {
		rs.byName = map[string]*Row{}
	}
	if rs.byName[name] == nil {
		rs.byName[name] = &Row{Name: name, Baseline: baseline}
		rs.order = append(rs.order, name)
	}
	rs.byName[name].Samples = append(rs.byName[name].Samples, s)
}

// reserve places the row in the order now, before its first sample.
func (rs *rowSet) reserve(name, baseline string) {
	if rs.byName == nil {
		rs.byName = map[string]*Row{}
	}
	if rs.byName[name] == nil {
		rs.byName[name] = &Row{Name: name, Baseline: baseline}
		rs.order = append(rs.order, name)
	}
}

func (rs *rowSet) list() []Row {
	out := make([]Row, len(rs.order))
	for i, name := range rs.order {
		out[i] = *rs.byName[name]
	}
	return out
}

// Result is a scenario's report.
type Result struct {
	Scenario string    `json:"scenario"`
	Date     time.Time `json:"date"`
	Params   string    `json:"params"`
	Rows     []Row     `json:"rows"`
	Notes    []string  `json:"notes,omitempty"`
	// Stages is the stage-time summary of the syncpipe runs, added up.
	Stages *Breakdown `json:"stages,omitempty"`
	// StagesOf says which runs Stages adds up when not all of them ("" =
	// all syncpipe runs).
	StagesOf string `json:"stages_of,omitempty"`
	// PeakRSS is the highest peak RSS of any syncpipe process of the
	// scenario, in bytes (0 = not measured).
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
	// Bars are the SPEC §9 bars this scenario decides.
	Bars []Bar `json:"bars,omitempty"`
}

// WriteMarkdown renders the result as a markdown table with throughput
// medians, min–max and the ratio to each row's baseline.
func (res Result) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "## %s — %s\n\n%s\n\n", res.Scenario, res.Date.Format("2006-01-02 15:04 MST"), res.Params)
	fmt.Fprintln(w, "| run | median time | rows/s (median) | rows/s min–max | ops/s (median) | MiB/s | vs baseline | CPU: own cores / machine busy | peak RSS (syncpipe) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	byName := map[string]Row{}
	for _, r := range res.Rows {
		byName[r.Name] = r
	}
	for _, r := range res.Rows {
		med, lo, hi := r.rate(func(s Sample) int64 { return s.Rows })
		ops, _, _ := r.rate(func(s Sample) int64 { return s.Ops })
		mib, _, _ := r.rate(func(s Sample) int64 { return s.Bytes })
		ratio := "—"
		if b, ok := byName[r.Baseline]; ok {
			bmed, _, _ := b.rate(func(s Sample) int64 { return s.Rows })
			ratio = fmt.Sprintf("%.0f%% of %s", 100*med/bmed, b.Name)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f–%.0f | %.0f | %.1f | %s | %s | %s |\n", r.Name,
			r.Median().Duration.Round(time.Millisecond), med, lo, hi, ops, mib/(1<<20), ratio, r.cpuBusy(), r.peakRSS())
	}
	res.writeExtras(w)
	for _, n := range res.Notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	fmt.Fprintln(w)
}

// Save writes results/<scenario>.md and .json under dir.
func (res Result) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(dir, res.Scenario+".md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, res.Scenario+".json"), js, 0o644); err != nil {
		return err
	}
	var svg strings.Builder
	if ok, err := WriteSVG(&svg, res); err != nil || !ok {
		return err
	}
	return os.WriteFile(filepath.Join(dir, res.Scenario+".svg"), []byte(svg.String()), 0o644)
}
