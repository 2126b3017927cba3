package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

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
func TestLargeTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const rows = 200_000
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 100, Todos: rows, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	want := e.todos(ctx, 1)
	e.start()
	e.waitCaughtUp(ctx)

	var w bulkWatch
	client := newSyncClient(e.api, e.token("alice"), w.observe)
	cctx, stopClient := context.WithCancel(ctx)
	defer stopClient()
	go client.run(cctx)
	e.waitFor(ctx, "the client's first checkpoint", func() bool { return client.complete() > 0 })

	// One transaction, 20× the default batch_max_rows.
	before := e.maxOpID(ctx)
	w.watch(`"description":"bulk `, rows)
	e.exec(ctx, `UPDATE todos SET description = 'bulk ' || id`)
	e.waitCaughtUp(ctx)
	e.converge(ctx, 2*time.Minute, want)
	e.onePutPerRow(ctx, before, rows)
	e.waitFor(ctx, "the client to see the whole transaction", func() bool { whole, _ := w.result(); return whole })
	if _, partial := w.result(); len(partial) > 0 {
		t.Fatalf("a client saw part of a transaction: %v", partial)
	}

	// The same, killed at five random points while it is applied.
	before = e.maxOpID(ctx)
	w.watch(`"description":"again `, rows)
	e.exec(ctx, `UPDATE todos SET description = 'again ' || id`)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	window := rows / 6
	for k := range 5 {
		point := int64(k*window + window/4 + rng.IntN(window/2))
		e.waitFor(ctx, fmt.Sprintf("the transaction to be %d changes in", point), func() bool {
			var n int64
			err := e.storage.QueryRow(ctx, `SELECT coalesce(max(stream_txn_changes), 0) FROM syncpipe.groups
				WHERE stream_txn_lsn IS NOT NULL`).Scan(&n)
			return err == nil && n >= point
		})
		e.kill()
		e.start()
	}
	e.waitCaughtUp(ctx)
	e.converge(ctx, 2*time.Minute, want)
	e.onePutPerRow(ctx, before, rows)
	e.waitFor(ctx, "the client to see the whole transaction", func() bool { whole, _ := w.result(); return whole })
	if _, partial := w.result(); len(partial) > 0 {
		t.Fatalf("after 5 crashes inside the transaction, a client saw part of it: %v", partial)
	}

	// 200 MB of TOASTed text in one transaction: 100 lists × 2 MB.
	w.watch("", 0)
	e.exec(ctx, `UPDATE lists SET name = repeat(md5(id::text), 62500)`)
	e.waitCaughtUp(ctx)
	e.converge(ctx, 3*time.Minute, want)
	if f := client.failures(); len(f) > 0 {
		t.Fatalf("the sync client saw protocol errors: %v", f)
	}
	e.alive()
}

// maxOpID is the highest op id in storage.
func (e *streamEnv) maxOpID(ctx context.Context) int64 {
	e.t.Helper()
	var n int64
	if err := e.storage.QueryRow(ctx, "SELECT coalesce(max(op_id), 0) FROM syncpipe.bucket_data").Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// onePutPerRow checks that the ops after op id before are exactly one PUT
// for each of rows todos (each is in one bucket) and nothing else.
func (e *streamEnv) onePutPerRow(ctx context.Context, before int64, rows int) {
	e.t.Helper()
	var puts, distinct, other int
	err := e.storage.QueryRow(ctx, `SELECT count(*) FILTER (WHERE op = 1),
			count(DISTINCT (bucket_name, object_id)) FILTER (WHERE op = 1), count(*) FILTER (WHERE op <> 1)
		FROM syncpipe.bucket_data WHERE op_id > $1 AND object_type = 'todos'`, before).Scan(&puts, &distinct, &other)
	if err != nil {
		e.t.Fatal(err)
	}
	if puts != rows || distinct != rows || other != 0 {
		e.t.Fatalf("the transaction of %d row updates wrote %d PUTs for %d rows and %d other ops; want one PUT per row", rows, puts, distinct, other)
	}
}
