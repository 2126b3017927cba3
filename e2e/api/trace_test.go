package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// span is what the test reads of a span printed by `-trace stdout`.
type span struct {
	Name        string `json:"Name"`
	SpanContext struct {
		TraceID string `json:"TraceID"`
		SpanID  string `json:"SpanID"`
	} `json:"SpanContext"`
	Parent struct {
		SpanID string `json:"SpanID"`
	} `json:"Parent"`
	Attributes []struct {
		Key   string `json:"Key"`
		Value struct {
			Value any `json:"Value"`
		} `json:"Value"`
	} `json:"Attributes"`
}

func (s span) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			b, _ := json.Marshal(a.Value.Value)
			return strings.Trim(string(b), `"`)
		}
	}
	return ""
}

// TestRunTraceShowsEveryStreamStage runs `syncpipe run -trace stdout` and
// streams a few transactions: every streamed batch must have one span per
// stage — read, decode, eval, build, probe, flush and commit — named
// "stream group 1/<stage>", all in one trace per batch (the read span its
// root, the others its children); no span is for a batch without rows
// (the idle stream between the transactions makes many); and the
// stage-time summary at exit must list the stages.
func TestRunTraceShowsEveryStreamStage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 5, Todos: 50, Seed: 2}})
	out, err := os.Create(filepath.Join(e.Dir, "spans.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p := e.StartWith(harness.ProcConfig{Args: []string{"-trace", "stdout"}, Stdout: out})
	e.WaitCaughtUp(ctx)
	for range 3 {
		e.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)`)
		e.WaitCaughtUp(ctx)
	}
	_ = p.Stop() // the spans and the stage-time summary are written at exit

	stages := map[string]map[string]bool{} // batch seq → stages seen, for the stream
	traces := map[string][]span{}          // trace id → the stream's spans in it
	data, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var s span
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("stdout is not a stream of JSON spans: %v", err)
		}
		if s.attr("rows") == "0" {
			t.Errorf("span %s of batch %s has 0 rows: a batch without rows must make no span", s.Name, s.attr("seq"))
		}
		if !strings.HasPrefix(s.attr("pipeline"), "stream") {
			continue
		}
		if want := "stream group 1/" + s.attr("stage"); s.Name != want {
			t.Errorf("span named %q, want %q", s.Name, want)
		}
		traces[s.SpanContext.TraceID] = append(traces[s.SpanContext.TraceID], s)
		seq := s.attr("seq")
		if stages[seq] == nil {
			stages[seq] = map[string]bool{}
		}
		stages[seq][s.Name[strings.LastIndex(s.Name, "/")+1:]] = true // spans are named pipeline/stage
	}
	want := []string{"read", "decode", "eval", "build", "probe", "flush", "commit"}
	full := 0
	for _, seen := range stages {
		all := true
		for _, w := range want {
			all = all && seen[w]
		}
		if all {
			full++
		}
	}
	if full < 3 {
		t.Errorf("%d streamed batches have a span for each of %v; want ≥ 3 (batches: %v)", full, want, stages)
	}
	checkBatchTraces(t, traces, len(want))
	logs := e.TailLogs(64 << 10)
	i := strings.LastIndex(logs, "stage-time summary")
	if i < 0 {
		t.Fatal("no stage-time summary at exit")
	}
	for _, w := range want {
		if !strings.Contains(logs[i:], `\n`+w+" ") && !strings.Contains(logs[i:], " "+w+" ") {
			t.Errorf("the stage-time summary lacks stage %s:\n%s", w, logs[i:])
		}
	}
}

// checkBatchTraces checks that each trace holds one batch's spans: one
// read span, its root, and every other stage's span (n in all) a child of
// it, all of the same seq.
func checkBatchTraces(t *testing.T, traces map[string][]span, n int) {
	t.Helper()
	for id, spans := range traces {
		var read *span
		for i, s := range spans {
			if s.attr("stage") == "read" {
				read = &spans[i]
			}
		}
		if read == nil || len(spans) != n {
			t.Errorf("trace %s has %d spans (read: %v), want %d with a read span", id, len(spans), read != nil, n)
			continue
		}
		for _, s := range spans {
			if s.attr("seq") != read.attr("seq") {
				t.Errorf("trace %s: %s has seq %s, the read span %s", id, s.Name, s.attr("seq"), read.attr("seq"))
			}
			if s.attr("stage") != "read" && s.Parent.SpanID != read.SpanContext.SpanID {
				t.Errorf("trace %s: %s's parent is %s, want the read span %s", id, s.Name, s.Parent.SpanID, read.SpanContext.SpanID)
			}
		}
	}
}
