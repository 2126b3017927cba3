package commands

import (
	"sync"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
)

// checkpointWatch keeps the rows of the latest complete checkpoint a
// harness.SyncClient saw (the part of cli's switchWatch the compaction
// tests use).
type checkpointWatch struct {
	mu   sync.Mutex
	rows bucketcheck.State
	n    int // complete checkpoints seen
}

// observe is the SyncClient's observe callback.
func (w *checkpointWatch) observe(_ string, rows map[string]map[string]string) {
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
func (w *checkpointWatch) holds(want bucketcheck.State) func() bool {
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
