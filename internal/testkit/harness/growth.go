package harness

import (
	"fmt"
	"sync"
)

// GrowthWatch checks, for a source that only grows, that the rows a sync
// client holds at complete checkpoints never shrink: a client must never
// be told that data it had is gone (an empty or partial checkpoint while
// a group is replaced or moved). Pass Observe to Env.Sync.
type GrowthWatch struct {
	mu     sync.Mutex
	last   int
	shrunk []string
}

// Observe counts the global and by_list rows of a complete checkpoint.
func (w *GrowthWatch) Observe(cp string, rows map[string]map[string]string) {
	n := CountRows(rows, "global[") + CountRows(rows, "by_list[")
	w.mu.Lock()
	defer w.mu.Unlock()
	if n < w.last {
		w.shrunk = append(w.shrunk, fmt.Sprintf("checkpoint %s: %d rows after %d", cp, n, w.last))
	}
	w.last = n
}

// Failures lists the checkpoints that held fewer rows than the one before.
func (w *GrowthWatch) Failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.shrunk...)
}
