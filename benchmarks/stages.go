package benchmarks

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// StageTime is one stage's line of a stage-time summary.
type StageTime struct {
	Stage   string        `json:"stage"`
	Kind    string        `json:"kind"`
	Workers int           `json:"workers"`
	Batches int           `json:"batches"`
	Rows    int64         `json:"rows"`
	Busy    time.Duration `json:"busy_ns"`
	Blocked time.Duration `json:"blocked_ns"`
}

// Breakdown is a stage-time summary (pipeline.Summary) in a form that
// crosses the process boundary: the child logs the table, the harness
// parses it back, adds up runs and renders it into reports and charts.
type Breakdown struct {
	Stages []StageTime    `json:"stages,omitempty"`
	Wall   time.Duration  `json:"wall_ns,omitempty"`
	Rows   int64          `json:"rows,omitempty"`
	byName map[string]int // index into Stages, built lazily by Add
}

// ParseBreakdown reads the table pipeline.Summary.WriteTable prints. The
// format is covered by a round-trip test, so a change to it fails there.
func ParseBreakdown(text string) (Breakdown, error) {
	var b Breakdown
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || f[0] == "STAGE":
		case f[0] == "wall" && len(f) >= 3:
			wall, err := time.ParseDuration(strings.TrimSuffix(f[1], ","))
			if err != nil {
				return b, fmt.Errorf("summary wall time %q: %w", f[1], err)
			}
			rows, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return b, fmt.Errorf("summary rows %q: %w", f[2], err)
			}
			b.Wall, b.Rows = wall, rows
		case len(f) == 10:
			var st StageTime
			var err error
			st.Stage, st.Kind = f[0], f[1]
			ints := []*int{&st.Workers, &st.Batches}
			for i, p := range ints {
				if *p, err = strconv.Atoi(f[2+i]); err != nil {
					return b, fmt.Errorf("summary line %q: %w", line, err)
				}
			}
			if st.Rows, err = strconv.ParseInt(f[4], 10, 64); err != nil {
				return b, fmt.Errorf("summary line %q: %w", line, err)
			}
			if st.Busy, err = time.ParseDuration(f[5]); err != nil {
				return b, fmt.Errorf("summary line %q: %w", line, err)
			}
			if st.Blocked, err = time.ParseDuration(f[8]); err != nil {
				return b, fmt.Errorf("summary line %q: %w", line, err)
			}
			b.Stages = append(b.Stages, st)
		default:
			return b, fmt.Errorf("unexpected summary line %q", line)
		}
	}
	return b, nil
}

// Add accumulates another run's breakdown: busy and blocked times, rows and
// wall time add up per stage name.
func (b *Breakdown) Add(o Breakdown) {
	if b.byName == nil {
		b.byName = map[string]int{}
		for i, st := range b.Stages {
			b.byName[st.Stage] = i
		}
	}
	for _, st := range o.Stages {
		i, ok := b.byName[st.Stage]
		if !ok {
			b.byName[st.Stage] = len(b.Stages)
			b.Stages = append(b.Stages, st)
			continue
		}
		p := &b.Stages[i]
		p.Workers = max(p.Workers, st.Workers)
		p.Batches += st.Batches
		p.Rows += st.Rows
		p.Busy += st.Busy
		p.Blocked += st.Blocked
	}
	b.Wall += o.Wall
	b.Rows += o.Rows
}

// Stage returns the named stage's line (zero if absent).
func (b Breakdown) Stage(name string) StageTime {
	for _, st := range b.Stages {
		if st.Stage == name {
			return st
		}
	}
	return StageTime{}
}

// Busiest names the stage with the most busy time per worker: with
// parallel stages, the one whose workers are saturated longest is the
// bottleneck.
func (b Breakdown) Busiest() string {
	best, name := time.Duration(0), ""
	for _, st := range b.Stages {
		if per := st.Busy / time.Duration(max(st.Workers, 1)); per > best {
			best, name = per, st.Stage
		}
	}
	return name
}

// WriteTable renders the breakdown like pipeline.Summary.WriteTable.
func (b Breakdown) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "STAGE\tKIND\tWORKERS\tBATCHES\tROWS\tBUSY\tBUSY%%\tROWS/S BUSY\tBLOCKED\tBLOCKED%%\t\n")
	for _, st := range b.Stages {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", st.Stage, st.Kind, st.Workers, st.Batches,
			st.Rows, roundDur(st.Busy), share(st.Busy, b.Wall), perSec(st.Rows, st.Busy), roundDur(st.Blocked), share(st.Blocked, b.Wall))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write stage breakdown: %w", err)
	}
	_, err := fmt.Fprintf(w, "wall %s, %d rows, %s rows/s\n", roundDur(b.Wall), b.Rows, perSec(b.Rows, b.Wall))
	if err != nil {
		return fmt.Errorf("write stage breakdown: %w", err)
	}
	return nil
}

func share(d, wall time.Duration) string {
	if wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(wall))
}

func perSec(rows int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(rows)/d.Seconds())
}

func roundDur(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
