package benchmarks

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

// TestParseBreakdownRoundTrip feeds a pipeline.Summary, prints it the way
// `syncpipe run` logs it and parses it back: the harness depends on that
// text format, so a change to it must fail here.
func TestParseBreakdownRoundTrip(t *testing.T) {
	s := pipeline.NewSummary()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := func(stage string, kind pipeline.StageKind, worker, rows int, busy time.Duration) {
		s.StageEnd(context.Background(), pipeline.StageEndInfo{
			StageInfo: pipeline.StageInfo{Stage: stage, Kind: kind, Worker: worker, Rows: rows},
			OutRows:   rows, Start: start, Duration: busy})
	}
	end("read", pipeline.KindSource, 0, 10000, 3*time.Minute+7*time.Second)
	end("eval", pipeline.KindProcess, 1, 10000, 1500*time.Millisecond)
	end("flush", pipeline.KindFlush, 0, 10000, 12345*time.Microsecond)
	end("commit", pipeline.KindCommit, 0, 10000, 7*time.Microsecond)
	s.StageBlocked(context.Background(), pipeline.BlockedInfo{StageInfo: pipeline.StageInfo{Stage: "read"}, Blocked: 2 * time.Second})

	var text strings.Builder
	if err := s.WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	got, err := ParseBreakdown(text.String())
	if err != nil {
		t.Fatalf("parse %q: %v", text.String(), err)
	}
	want := breakdownOf(s)
	if len(got.Stages) != len(want.Stages) {
		t.Fatalf("parsed %d stages, want %d:\n%s", len(got.Stages), len(want.Stages), text.String())
	}
	// The printed durations are rounded; parsed values must be within that.
	near := func(a, b time.Duration) bool {
		d := a - b
		return d > -100*time.Millisecond && d < 100*time.Millisecond
	}
	for i, w := range want.Stages {
		g := got.Stages[i]
		if g.Stage != w.Stage || g.Kind != w.Kind || g.Workers != w.Workers || g.Batches != w.Batches || g.Rows != w.Rows ||
			!near(g.Busy, w.Busy) || !near(g.Blocked, w.Blocked) {
			t.Errorf("stage %d: parsed %+v, want %+v", i, g, w)
		}
	}
	if got.Rows != 10000 || !near(got.Wall, want.Wall) {
		t.Errorf("parsed wall %v rows %d, want %v and 10000", got.Wall, got.Rows, want.Wall)
	}
	if b := got.Busiest(); b != "read" {
		t.Errorf("busiest stage %q, want read", b)
	}
}

func TestBreakdownAdd(t *testing.T) {
	var b Breakdown
	b.Add(Breakdown{Stages: []StageTime{{Stage: "read", Rows: 5, Busy: time.Second}}, Wall: time.Second, Rows: 5})
	b.Add(Breakdown{Stages: []StageTime{{Stage: "read", Rows: 7, Busy: time.Second, Workers: 2}, {Stage: "flush", Rows: 7}}, Wall: 2 * time.Second, Rows: 7})
	if len(b.Stages) != 2 || b.Stage("read").Rows != 12 || b.Stage("read").Busy != 2*time.Second || b.Stage("read").Workers != 2 {
		t.Fatalf("added up: %+v", b)
	}
	if b.Wall != 3*time.Second || b.Rows != 12 {
		t.Fatalf("wall %v rows %d, want 3s and 12", b.Wall, b.Rows)
	}
}

func TestParseBreakdownRejectsGarbage(t *testing.T) {
	if _, err := ParseBreakdown("read source 1 x 10 1s 1% 10 0s 0%"); err == nil {
		t.Fatal("want an error for a non-numeric batch count")
	}
}

// breakdownOf copies an in-process summary: what the parsed table must
// match.
func breakdownOf(s *pipeline.Summary) Breakdown {
	var b Breakdown
	for _, st := range s.Stages() {
		b.Stages = append(b.Stages, StageTime{Stage: st.Stage, Kind: st.Kind.String(), Workers: st.Workers,
			Batches: st.Batches, Rows: st.Rows, Busy: st.Busy, Blocked: st.Blocked})
		if st.Kind == pipeline.KindSource || st.Kind == pipeline.KindCommit {
			b.Rows = st.Rows // as WriteTable: the commit's count wins
		}
	}
	b.Wall = s.Wall()
	return b
}
