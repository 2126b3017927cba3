package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// JSONLLine is what the tests read of a line of the jsonl sink.
type JSONLLine struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	LSN  string `json:"lsn"`
	I    int64  `json:"i"`
	Puts []struct {
		ObjectID string          `json:"object_id"`
		Data     json.RawMessage `json:"data"`
	} `json:"puts"`
}

// ReadJSONL reads every line of a jsonl sink file (e.g.
// dir/public.todos.jsonl), failing the test on a line it cannot parse.
func ReadJSONL(t testing.TB, path string) []JSONLLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []JSONLLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var l JSONLLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s line %d: %v: %s", path, n, err, sc.Bytes())
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// JSONLStreamPast reports whether the committed stream position of the
// jsonl sink writing to dir (its _progress.json) is at or past lsn.
func (e *Env) JSONLStreamPast(ctx context.Context, dir, lsn string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "_progress.json"))
	if err != nil {
		return false
	}
	var p struct {
		Stream *struct {
			LSN uint64 `json:"lsn"`
		} `json:"stream"`
	}
	if json.Unmarshal(b, &p) != nil || p.Stream == nil {
		return false
	}
	var past bool
	err = e.Src.QueryRow(ctx, "SELECT $1::pg_lsn >= $2::pg_lsn", fmt.Sprintf("%X/%X", p.Stream.LSN>>32, uint32(p.Stream.LSN)), lsn).Scan(&past)
	return err == nil && past
}
