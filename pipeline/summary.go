package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Summary is a StageTracer (and BackpressureTracer) that adds up where the
// time of a run goes, per stage name, across all pipelines that share it:
// busy time inside each stage, its share of wall time, rows per busy second
// (the stage's capacity) and time blocked on a full downstream channel (a
// stage that blocks a lot is not the bottleneck; the one it waits for is).
// It is safe for concurrent use and cheap enough to leave on in production.
type Summary struct {
	mu          sync.Mutex
	stages      []*StageSummary // in order of first appearance = pipeline order
	index       map[string]*StageSummary
	first, last time.Time
}

// StageSummary is the accumulated record of one stage.
type StageSummary struct {
	Stage   string
	Kind    StageKind
	Workers int           // highest worker index seen + 1
	Batches int           // batches finished without error
	Errors  int           // batches that failed
	Rows    int64         // input rows (output rows for a source)
	Bytes   int64         // input bytes (output bytes for a source)
	Busy    time.Duration // summed over workers, so it can exceed wall time
	Blocked time.Duration // summed over workers
}

// NewSummary returns an empty Summary.
func NewSummary() *Summary { return &Summary{index: map[string]*StageSummary{}} }

// StageStart implements StageTracer; all accounting happens in StageEnd.
func (s *Summary) StageStart(ctx context.Context, _ StageInfo) context.Context { return ctx }

// StageEnd implements StageTracer.
func (s *Summary) StageEnd(_ context.Context, info StageEndInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stageLocked(info.StageInfo)
	st.Busy += info.Duration
	switch {
	case errors.Is(info.Err, ErrEndOfInput):
		// The source's final, empty read: its time counts, it is no batch.
	case info.Err != nil:
		st.Errors++
	case info.Kind == KindSource:
		st.Batches++
		st.Rows += int64(info.OutRows)
		st.Bytes += info.OutBytes
	default:
		st.Batches++
		st.Rows += int64(info.Rows)
		st.Bytes += info.Bytes
	}
	s.seenLocked(info.Start, info.Start.Add(info.Duration))
}

// StageBlocked implements BackpressureTracer.
func (s *Summary) StageBlocked(_ context.Context, info BlockedInfo) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stageLocked(info.StageInfo).Blocked += info.Blocked
	s.seenLocked(now.Add(-info.Blocked), now)
}

func (s *Summary) stageLocked(info StageInfo) *StageSummary {
	st := s.index[info.Stage]
	if st == nil {
		st = &StageSummary{Stage: info.Stage, Kind: info.Kind}
		s.index[info.Stage] = st
		s.stages = append(s.stages, st)
	}
	st.Workers = max(st.Workers, info.Worker+1)
	return st
}

func (s *Summary) seenLocked(from, to time.Time) {
	if s.first.IsZero() || from.Before(s.first) {
		s.first = from
	}
	if to.After(s.last) {
		s.last = to
	}
}

// Stages returns a copy of the per-stage records in pipeline order.
func (s *Summary) Stages() []StageSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StageSummary, len(s.stages))
	for i, st := range s.stages {
		out[i] = *st
	}
	return out
}

// Wall returns the time from the first stage start to the last event seen.
func (s *Summary) Wall() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Sub(s.first)
}

// String is the one-line form for a log line, like
// "wall 780ms | read 82ms | eval 134ms | write 547ms | commit 3ms".
func (s *Summary) String() string {
	wall, stages := s.Wall(), s.Stages()
	var b strings.Builder
	b.WriteString("wall " + fmtDuration(wall))
	for _, st := range stages {
		b.WriteString(" | " + st.Stage + " " + fmtDuration(st.Busy))
	}
	return b.String()
}

// WriteTable prints the per-stage breakdown as an aligned table, meant for
// the end of a run. Percentages are of wall time and exceed 100% when a
// stage's workers were busy in parallel.
func (s *Summary) WriteTable(w io.Writer) error {
	wall, stages := s.Wall(), s.Stages()
	var total int64
	for _, st := range stages {
		if st.Kind == KindSource || st.Kind == KindCommit {
			total = st.Rows // the commit's count wins: those rows are done
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "STAGE\tKIND\tWORKERS\tBATCHES\tROWS\tBUSY\tBUSY%%\tROWS/S BUSY\tBLOCKED\tBLOCKED%%\t\n")
	for _, st := range stages {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n",
			st.Stage, st.Kind, st.Workers, st.Batches, st.Rows, fmtDuration(st.Busy), pct(st.Busy, wall),
			fmtRate(st.Rows, st.Busy), fmtDuration(st.Blocked), pct(st.Blocked, wall))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write stage summary: %w", err)
	}
	if _, err := fmt.Fprintf(w, "wall %s, %d rows, %s rows/s\n", fmtDuration(wall), total, fmtRate(total, wall)); err != nil {
		return fmt.Errorf("write stage summary: %w", err)
	}
	return nil
}

func pct(d, wall time.Duration) string {
	if wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(d)/float64(wall))
}

func fmtRate(rows int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	r := float64(rows) / d.Seconds()
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}
