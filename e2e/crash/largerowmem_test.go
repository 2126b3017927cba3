package crash

import (
	"context"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestLargeRowMemoryReturned: after a 30 MB row is streamed, the running
// syncpipe's live heap (go_gc_heap_live_bytes) comes back to less than
// its level before the row plus half the row's size. Before, the buffers
// that row grew (decoder arena and column slice, encode buffers,
// previous-state arena) were kept at their high-water mark: 211 MiB, seven
// times the row, for good.
func TestLargeRowMemoryReturned(t *testing.T) {
	t.Parallel()
	const rowBytes = 30 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := harness.FreeAddr(t)
	// A memory limit below what the row needs makes the runtime collect as
	// soon as the small changes below allocate, so the live heap is
	// measured soon after the row is gone (with GOGC alone, the next
	// collection waits for the heap to grow past the row's peak).
	e := harness.New(t, harness.Options{
		Data: &todos.Size{Lists: 2, Todos: 20, Seed: 5},
		Env:  []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + addr, "GOMEMLIMIT=48MiB"},
	})
	e.Start()
	e.WaitCaughtUp(ctx)
	small := func() {
		e.Exec(ctx, `UPDATE todos SET completed = NOT completed WHERE id = (SELECT min(id::text)::uuid FROM todos)`)
		e.WaitCaughtUp(ctx)
	}
	live := func() float64 {
		v, _ := harness.Sample(harness.Scrape(ctx, addr), "go_gc_heap_live_bytes")
		return v
	}
	// The baseline: the lowest live heap over a few small batches.
	base := live()
	for range 5 {
		small()
		base = min(base, live())
	}
	e.Exec(ctx, `UPDATE todos SET description = repeat('x', $1) WHERE id = (SELECT max(id::text)::uuid FROM todos)`, rowBytes)
	e.WaitCaughtUp(ctx)
	lowest := live()
	// Each small batch allocates, so collections follow; 40 of them are
	// plenty for the live heap to settle once nothing keeps the row.
	for i := 0; i < 40 && lowest >= base+rowBytes/2; i++ {
		small()
		lowest = min(lowest, live())
	}
	if lowest >= base+rowBytes/2 {
		t.Errorf("live heap %d MiB after the %d MiB row (%d MiB before it), want below %d MiB: buffers keep the row's size",
			int(lowest)>>20, rowBytes>>20, int(base)>>20, int(base+rowBytes/2)>>20)
	}
	t.Logf("live heap: %d MiB before the %d MiB row, %d MiB after it", int(base)>>20, rowBytes>>20, int(lowest)>>20)
}
