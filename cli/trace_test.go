package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// span is what the test reads of a span printed by `-trace stdout`.
type span struct {
	Name       string `json:"Name"`
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
// stage — read, decode, eval, build, probe, flush and commit — and the stage-time
// summary at exit must list them.
func TestRunTraceShowsEveryStreamStage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 5, Todos: 50, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(e.dir, "spans.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	e.startWith(out, "-trace", "stdout")
	e.waitCaughtUp(ctx)
	for range 3 {
		e.exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)`)
		e.waitCaughtUp(ctx)
	}
	e.stop()

	stages := map[string]map[string]bool{} // batch seq → stages seen, for the stream
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
		if !strings.HasPrefix(s.attr("pipeline"), "stream") {
			continue
		}
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
	logs := e.tailLogs(64 << 10)
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
