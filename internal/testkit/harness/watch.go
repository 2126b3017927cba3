package harness

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
)

// Watchers of what clients and storage see while groups switch, and the
// client knobs the tests of switches use.

// CheckpointWatch follows the complete checkpoints one sync client sees:
// the rows of the latest one (Holds) and, for the tests of group switches,
// which group's buckets each holds (bucket names are "<group>#…"; Seen,
// Problems). Its Observe is a SyncClient's observe function; the zero
// value is ready to use.
type CheckpointWatch struct {
	mu     sync.Mutex
	groups map[int]int // group → complete checkpoints holding its buckets only
	last   int         // group of the latest complete checkpoint
	bad    []string    // checkpoints mixing groups, without buckets, or back to an older group
	rows   bucketcheck.State
	n      int // complete checkpoints seen
}

// Observe records one complete checkpoint.
func (w *CheckpointWatch) Observe(cp string, rows map[string]map[string]string) {
	gs := map[int]bool{}
	copied := bucketcheck.State{}
	for name, rs := range rows {
		g, _, _ := strings.Cut(name, "#")
		n, err := strconv.Atoi(g)
		if err != nil {
			n = -1
		}
		gs[n] = true
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
	if w.groups == nil {
		w.groups = map[int]int{}
	}
	w.rows = copied
	w.n++
	if len(gs) != 1 {
		ids := make([]int, 0, len(gs))
		for g := range gs {
			ids = append(ids, g)
		}
		sort.Ints(ids)
		w.bad = append(w.bad, fmt.Sprintf("checkpoint %s holds buckets of groups %v", cp, ids))
		return
	}
	for g := range gs {
		if g < w.last {
			w.bad = append(w.bad, fmt.Sprintf("checkpoint %s holds group %d's buckets after group %d's", cp, g, w.last))
		}
		w.groups[g]++
		w.last = g
	}
}

// Seen is how many complete checkpoints held group g's buckets only.
func (w *CheckpointWatch) Seen(g int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.groups[g]
}

// Problems lists the checkpoints that mixed groups, held no bucket, or
// went back to an older group.
func (w *CheckpointWatch) Problems() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

// Holds returns a condition: the latest complete checkpoint held exactly
// want (compared once per checkpoint).
func (w *CheckpointWatch) Holds(want bucketcheck.State) func() bool {
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

// Once makes one connection and syncs until the server ends it (nil) or it
// fails; protocol errors are recorded in Failures too. For tests that
// decide when the client reconnects; Run reconnects by itself.
func (c *SyncClient) Once(ctx context.Context) error { return c.once(ctx) }

// SetToken replaces the token of the client's next connections. Call it
// only while no connection of c runs.
func (c *SyncClient) SetToken(token string) { c.token = token }

// TokenTTL mints a client JWT for sub with lifetime ttl through
// `syncpipe token --ttl`.
func (e *Env) TokenTTL(sub string, ttl time.Duration) string {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := Run(e.T, ctx, "token", "--config", e.Config, "--sub", sub, "--ttl", ttl.String())
	if code != 0 {
		e.T.Fatalf("syncpipe token: exit %d: %s", code, stderr)
	}
	return strings.TrimSpace(stdout)
}

// WatchServing samples storage every 10 ms until ctx ends and then
// reports how many samples found no ACTIVE group with a checkpoint: while
// groups are replaced, the old one must serve until the new one takes over.
// (The 10 ms is a sampling rate, not a wait for anything.)
func (e *Env) WatchServing(ctx context.Context) <-chan int {
	out := make(chan int, 1)
	go func() {
		gaps := 0
		for ctx.Err() == nil {
			var n int
			err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.groups WHERE state = 'ACTIVE' AND last_checkpoint IS NOT NULL`).Scan(&n)
			if err == nil && n == 0 {
				gaps++
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		out <- gaps
	}()
	return out
}
