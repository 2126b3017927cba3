package badinput

import (
	"flag"
	"os"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
)

var update = flag.Bool("update", false, "rewrite golden files and the README's bad-input catalogue")

// checkGolden compares got with the golden file (with -update: rewrites
// it).
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Fatalf("output differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

// latest keeps the rows of the latest complete checkpoint a
// harness.SyncClient saw.
type latest struct {
	mu   sync.Mutex
	rows bucketcheck.State
	n    int // complete checkpoints seen
}

func (w *latest) observe(_ string, rows map[string]map[string]string) {
	copied := bucketcheck.State{}
	for name, rs := range rows {
		if len(rs) > 0 {
			m := make(map[string]string, len(rs))
			for k, v := range rs {
				m[k] = v
			}
			copied[name] = m
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rows = copied
	w.n++
}

// holds returns a condition: the latest complete checkpoint held exactly
// want (compared once per checkpoint).
func (w *latest) holds(want bucketcheck.State) func() bool {
	compared, equal := -1, false
	return func() bool {
		w.mu.Lock()
		rows, n := w.rows, w.n // rows is replaced, never modified
		w.mu.Unlock()
		if n != compared {
			compared, equal = n, rows != nil && bucketcheck.Diff(rows, want) == nil
		}
		return equal
	}
}
