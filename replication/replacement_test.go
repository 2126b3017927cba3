package replication

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestSlotLostThreeTimesServesThroughout drops the serving group's slot
// three times in a row under one replicator while the source keeps
// growing. Each loss starts a replacement group that re-snapshots while
// the old one keeps serving: storage never lacks an ACTIVE group with a
// checkpoint (sampled every 10 ms), each old group is retired once
// replaced, and the last group holds the source. (The same through the
// binary, with a sync client that must never see its rows shrink:
// e2e/crash TestSlotLostThreeTimes.)
func TestSlotLostThreeTimesServesThroughout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newEnv(t, todos.Size{Lists: 20, Todos: 5000, Seed: 5}, "")
	stop := e.runReplicator(t, ctx)
	e.waitCheckpoint(t, ctx)

	gctx, stopGrowing := context.WithCancel(ctx)
	grower := pgtest.Connect(t, e.source)
	// Both goroutines end before the test's cleanup closes their
	// connections, also when the test fails early.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopGrowing()
	grown := make(chan error, 1)
	wg.Go(func() {
		for n := 0; ; n++ {
			_, err := grower.Exec(gctx, `INSERT INTO todos (id, list_id, description)
				SELECT gen_random_uuid(), id, 'grown ' || $1::text FROM lists ORDER BY random() LIMIT 2`, fmt.Sprint(n))
			if gctx.Err() != nil {
				grown <- nil
				return
			}
			if err != nil {
				grown <- err
				return
			}
			select {
			case <-gctx.Done():
			case <-time.After(30 * time.Millisecond): // the pace of the load, not synchronisation
			}
		}
	})
	gaps := make(chan int, 1)
	wg.Go(func() {
		n := 0
		for gctx.Err() == nil {
			var serving int
			err := e.store.Pool().QueryRow(gctx, `SELECT count(*) FROM groups WHERE state = 'ACTIVE' AND last_checkpoint IS NOT NULL`).Scan(&serving)
			if err == nil && serving == 0 {
				n++
			}
			select {
			case <-gctx.Done():
			case <-time.After(10 * time.Millisecond): // the sampling interval, not synchronisation
			}
		}
		gaps <- n
	})

	g := e.activeGroup(t, ctx)
	for range 3 {
		e.dropSlot(t, ctx, g.SlotName)
		g = e.waitTakeover(t, ctx, g) // the old group retired: slot gone, data cleared
	}
	stopGrowing()
	if err := <-grown; err != nil {
		t.Fatalf("grow the source: %v", err)
	}
	if n := <-gaps; n > 0 {
		t.Fatalf("%d times no group was serving: a group was retired before its replacement took over", n)
	}
	e.waitCheckpoint(t, ctx)
	e.checkReplaced(t, g)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
