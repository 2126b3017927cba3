package benchmarks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSnapshotSmoke runs P1 once at a tiny scale through the code path of
// `go run ./benchmarks/cmd/bench -scenario snapshot`: a throwaway cluster,
// a built syncpipe binary as a child process, the raw ceiling, the report
// files, and a comparison with a second binary (the same one: the code
// path of -compare-bin). It asserts what storage holds, never how fast it
// got there.
func TestSnapshotSmoke(t *testing.T) {
	ctx, h := smokeHarness(t, 3*time.Minute)
	bin, dir := h.Syncpipe, h.Dir
	const todosN, lists = 3000, 30
	res, err := RunSnapshot(ctx, SnapshotOptions{Todos: todosN, Lists: lists, Workers: []int{2}, ChunkRows: 500, Runs: 1,
		Harness: &Harness{Syncpipe: bin, Dir: dir, Compare: bin}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 4 || res.Rows[1].Name != res.Rows[0].Name+compareSuffix || res.Rows[1].Workers != 0 || res.Rows[2].Name != p7Name {
		t.Fatalf("rows %+v: want syncpipe with both binaries (the old one not in the chart's series), P7 into jsonl and the raw ceiling", res.Rows)
	}
	// One by_list op per todo and one global op per list (P7: one line each).
	for _, r := range res.Rows {
		if got := r.Samples[0].Ops; got != todosN+lists {
			t.Errorf("%s: %d ops stored, want %d", r.Name, got, todosN+lists)
		}
	}
	if res.PeakRSS <= 0 || res.Stages == nil || res.Stages.Stage("read").Rows != todosN+lists {
		t.Errorf("peak RSS %d, stages %+v: want the child's RSS and a read stage of %d rows", res.PeakRSS, res.Stages, todosN+lists)
	}
	out := filepath.Join(dir, "results")
	if err := res.Save(out); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".md", ".json", ".svg"} {
		b, err := os.ReadFile(filepath.Join(out, "snapshot"+ext))
		if err != nil || len(b) == 0 {
			t.Errorf("snapshot%s: %v (%d bytes)", ext, err, len(b))
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "snapshot.md"))
	for _, s := range []string{"Peak RSS of the syncpipe process", "| syncpipe, 2 worker(s) | ", "New build vs old build", "comparison run: every syncpipe configuration"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("snapshot.md lacks %q:\n%s", s, md)
		}
	}
}
