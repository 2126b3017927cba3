package crash

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/longtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// bulkWatch follows, in every complete checkpoint a sync client sees,
// how many todos carry a bulk update's marker: a client must see all of
// the transaction or none of it.
type bulkWatch struct {
	mu      sync.Mutex
	marker  string
	total   int
	partial []string // checkpoints that held part of the transaction
	whole   bool     // a checkpoint held all of it
}

func (w *bulkWatch) observe(cp string, rows map[string]map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marker == "" {
		return
	}
	n := 0
	for name, rs := range rows {
		if !strings.Contains(name, "by_list[") {
			continue
		}
		for _, data := range rs {
			if strings.Contains(data, w.marker) {
				n++
			}
		}
	}
	switch {
	case n == w.total:
		w.whole = true
	case n > 0:
		w.partial = append(w.partial, fmt.Sprintf("checkpoint %s: %d of %d rows", cp, n, w.total))
	}
}

func (w *bulkWatch) watch(marker string, total int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marker, w.total, w.whole, w.partial = marker, total, false, nil
}

func (w *bulkWatch) result() (whole bool, partial []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.whole, append([]string(nil), w.partial...)
}

// TestLargeTransactions applies source transactions far larger than one
// storage batch through a real `syncpipe run`: a 200,000-row UPDATE (with
// the default batch limits), the same again with SIGKILLs at five random
// points while it is being applied, and a transaction carrying 200 MB of
// TOASTed text. Storage must equal the source after each, every updated
// row must get exactly one new PUT (pieces written before a crash are
// reused, not written again), and a sync client polling the API throughout
// must never see a checkpoint holding part of a transaction.
//
// Long work (a crash loop inside large transactions): by default 50,000
// rows (still 5× the default batch_max_rows of 10,000), three kills and
// 50 MB of TOASTed text (100 lists × 0.5 MB), with longtest's fixed seed;
// SYNCPIPE_TEST_LONG=1 runs the sizes above.
func TestLargeTransactions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	rows := longtest.Pick(50_000, 200_000)
	kills := longtest.Pick(3, 5)
	toastRepeat := longtest.Pick(15625, 62500) // × 32 bytes of md5 = 0.5 MB, 2 MB a list
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 100, Todos: rows, Seed: 3}})
	want := e.Todos(ctx, 1)
	e.Start()
	e.WaitCaughtUp(ctx)

	var w bulkWatch
	client := e.Sync("alice", w.observe)
	e.WaitFor(ctx, "the client's first checkpoint", func() bool { return client.Complete() > 0 })

	// One transaction, several times the default batch_max_rows.
	before := maxOpID(ctx, e)
	w.watch(`"description":"bulk `, rows)
	e.Exec(ctx, `UPDATE todos SET description = 'bulk ' || id`)
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, 2*time.Minute, want)
	onePutPerRow(ctx, e, before, rows)
	e.WaitFor(ctx, "the client to see the whole transaction", func() bool { whole, _ := w.result(); return whole })
	if _, partial := w.result(); len(partial) > 0 {
		t.Fatalf("a client saw part of a transaction: %v", partial)
	}

	// The same, killed at random points while it is applied.
	before = maxOpID(ctx, e)
	w.watch(`"description":"again `, rows)
	e.Exec(ctx, `UPDATE todos SET description = 'again ' || id`)
	rng := rand.New(rand.NewPCG(longtest.Seed(t), 7))
	window := rows / (kills + 1)
	for k := range kills {
		point := int64(k*window + window/4 + rng.IntN(window/2))
		e.WaitFor(ctx, fmt.Sprintf("the transaction to be %d changes in", point), func() bool {
			var n int64
			err := e.Storage.QueryRow(ctx, `SELECT coalesce(max(stream_txn_changes), 0) FROM syncpipe.groups
				WHERE stream_txn_lsn IS NOT NULL`).Scan(&n)
			return err == nil && n >= point
		})
		e.Kill()
		e.Start()
	}
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, 2*time.Minute, want)
	onePutPerRow(ctx, e, before, rows)
	e.WaitFor(ctx, "the client to see the whole transaction", func() bool { whole, _ := w.result(); return whole })
	if _, partial := w.result(); len(partial) > 0 {
		t.Fatalf("after %d crashes inside the transaction, a client saw part of it: %v", kills, partial)
	}

	// Large TOASTed text in one transaction: 100 lists × 2 MB (0.5 MB by default).
	w.watch("", 0)
	e.Exec(ctx, `UPDATE lists SET name = repeat(md5(id::text), $1)`, toastRepeat)
	e.WaitCaughtUp(ctx)
	e.Converge(ctx, 3*time.Minute, want)
	if f := client.Failures(); len(f) > 0 {
		t.Fatalf("the sync client saw protocol errors: %v", f)
	}
	e.Alive()
}
