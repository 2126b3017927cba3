package pipelines

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRunJSONLWithoutStorage runs `syncpipe run` on a config with no
// storage section and one jsonl pipeline: validate accepts it, the
// snapshot and streamed changes arrive, the pipeline's state is in its
// state file, a SIGKILL and restart resume without loss or repeat (same
// version, no new snapshot), and status shows the pipeline from the state
// file. (Its pipeline's name, and so its slot's, is its own: slots are
// the cluster's, shared by the package's parallel tests.)
func TestRunJSONLWithoutStorage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "archive")
	e := harness.New(t, harness.Options{
		NoStorage: true,
		Data:      &todos.Size{Lists: 5, Todos: 200, Seed: 3},
		Top: fmt.Sprintf(`pipelines:
  - name: archive
    tables: [todos]
    stages: {chunk_rows: 40}
    sink: {type: jsonl, settings: {dir: %q}}
`, out),
	})
	if code, stdout, stderr := harness.Run(t, ctx, "validate", "--config", e.Config); code != cli.ExitOK ||
		!strings.Contains(stdout, "ok (1 pipeline(s)") {
		t.Fatalf("validate: exit %d:\n%s%s", code, stdout, stderr)
	}
	file := filepath.Join(out, "public.todos.jsonl")
	p := e.Start()
	p.WaitLogged(ctx, "syncpipe starting without storage")
	e.WaitFor(ctx, "the snapshot of 200 todos", func() bool { return fileSize(file) > 0 && len(harness.ReadJSONL(t, file)) >= 200 })
	e.Exec(ctx, `UPDATE todos SET description = 'streamed' WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 10)`)
	e.Exec(ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 3)`)
	target := e.SourceLSN(ctx)
	e.WaitFor(ctx, "the jsonl stream past "+target, func() bool { return e.JSONLStreamPast(ctx, out, target) })
	state := readState(t, filepath.Join(e.Dir, harness.StateDir, "archive.state.json"))
	if state.Version != 1 || !state.SnapshotDone || state.SlotName != "syncpipe_p_archive" || state.SinkType != "jsonl" {
		t.Fatalf("state file after the snapshot: %+v", state)
	}

	// A crash, changes while down, a restart: the same version resumes
	// from the sink's progress, with only the new changes.
	e.Kill()
	e.Exec(ctx, `UPDATE todos SET description = 'while down' WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 4)`)
	target = e.SourceLSN(ctx)
	e.Start()
	e.WaitFor(ctx, "the jsonl stream past "+target+" after the restart", func() bool { return e.JSONLStreamPast(ctx, out, target) })
	if state := readState(t, filepath.Join(e.Dir, harness.StateDir, "archive.state.json")); state.Version != 1 {
		t.Errorf("the restart started version %d; want version 1 resumed", state.Version)
	}
	lines := harness.ReadJSONL(t, file)
	snapshot, streamed := map[string]int{}, map[string]int{}
	var down int
	for _, l := range lines {
		if l.LSN == "" {
			snapshot[l.Key]++
			continue
		}
		streamed[fmt.Sprintf("%s@%s/%d", l.Key, l.LSN, l.I)]++
		if len(l.Puts) > 0 && strings.Contains(string(l.Puts[0].Data), "while down") {
			down++
		}
	}
	if len(snapshot) != 200 {
		t.Errorf("%d snapshot rows; want 200", len(snapshot))
	}
	for k, n := range snapshot {
		if n != 1 {
			t.Errorf("snapshot row %s written %d times", k, n)
		}
	}
	if len(streamed) != 10+3+4 || down != 4 {
		t.Errorf("%d streamed changes (%d made while down); want 17 (4)", len(streamed), down)
	}
	for k, n := range streamed {
		if n != 1 {
			t.Errorf("streamed change %s written %d times", k, n)
		}
	}

	e.StopAll()
	code, status, stderr := harness.Run(t, ctx, "status", "--config", e.Config)
	if code != cli.ExitOK {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	var archive string
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "archive ") {
			archive = l
		}
	}
	if f := strings.Fields(archive); len(f) < 7 || f[1] != "jsonl" || f[2] != "todos" || f[3] != "1" || f[4] != "done" || !strings.Contains(f[5], "/") {
		t.Errorf("status shows the archive pipeline as %q; want sink jsonl, tables todos, version 1, snapshot done, a stream LSN:\n%s", archive, status)
	}
}

// pipelineState is what the test reads of a pipeline's state file.
type pipelineState struct {
	Version      int    `json:"version"`
	SinkType     string `json:"sink_type"`
	SlotName     string `json:"slot_name"`
	SnapshotDone bool   `json:"snapshot_done"`
	StreamLSN    string `json:"stream_lsn"`
}

func readState(t *testing.T, path string) pipelineState {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s pipelineState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}
