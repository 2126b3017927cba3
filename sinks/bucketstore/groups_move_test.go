package bucketstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/logbuf"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestEnsureGroupMovesOldStorageVersion: processes starting at once on
// storage whose ACTIVE group is of an older storage version (1 or 2), with
// its rules, agree on one PROCESSING group of the current version, said
// once in the log; the old group goes on serving until the new one's
// first checkpoint, which stops it. A PROCESSING group of the old version
// (a rules change the previous syncpipe had begun) is stopped, not moved
// from later.
func TestEnsureGroupMovesOldStorageVersion(t *testing.T) {
	t.Parallel()
	for _, from := range []int{storageV1, storageV2} {
		t.Run(fmt.Sprintf("v%d", from), func(t *testing.T) {
			t.Parallel()
			ensureGroupMoves(t, from)
		})
	}
}

func ensureGroupMoves(t *testing.T, from int) {
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	const procs = 4
	stores := make([]*Store, procs)
	for i := range stores {
		s, err := Open(ctx, Config{URI: uri, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		stores[i] = s
	}
	cat := stores[0].Catalog()
	const rules = "bucket_definitions: {}"
	old, err := cat.createGroup(ctx, rules, "sp_", from)
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.MarkSnapshotDone(ctx, old.ID, 10); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := stores[0].Writes().Commit(ctx, old.ID, 20, 0); err != nil || !ok {
		t.Fatalf("activate the v%d group: %v %v", from, ok, err)
	}
	pending, err := cat.createGroup(ctx, "bucket_definitions: {other: {}}", "sp_", from)
	if err != nil {
		t.Fatal(err)
	}

	got := make([][]Group, procs)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			gs, err := s.Catalog().EnsureGroup(ctx, rules, "sp_")
			if err != nil {
				t.Error(err)
			}
			got[i] = gs
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, gs := range got {
		if len(gs) != 2 || gs[0].ID != old.ID || gs[0].State != StateActive || gs[0].StorageVersion != from ||
			gs[1].State != StateProcessing || gs[1].Rules != rules || gs[1].StorageVersion != CurrentStorageVersion || gs[1].ID != got[0][1].ID {
			t.Fatalf("process %d: groups %+v, want the v%d group ACTIVE and one new PROCESSING group of version %d", i, gs, from, CurrentStorageVersion)
		}
	}
	moved := got[0][1]
	if g, err := cat.Group(ctx, pending.ID); err != nil || g.State != StateStop {
		t.Fatalf("the pending v%d group: %+v %v, want STOP", from, g, err)
	}
	moveLog := fmt.Sprintf("storage version %d → %d: re-snapshot in the background; clients are served from group", from, CurrentStorageVersion)
	if n := strings.Count(logs.String(), moveLog); n != 1 {
		t.Fatalf("the move logged %d times, want once:\n%s", n, logs.String())
	}

	if err := cat.MarkSnapshotDone(ctx, moved.ID, 30); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := stores[0].Writes().Commit(ctx, moved.ID, 40, 0); err != nil || !ok {
		t.Fatalf("the new group's first checkpoint: %v %v", ok, err)
	}
	if g, err := cat.Group(ctx, old.ID); err != nil || g.State != StateStop {
		t.Fatalf("the v%d group after the takeover: %+v %v, want STOP", from, g, err)
	}
	gs, err := cat.EnsureGroup(ctx, rules, "sp_")
	if err != nil || len(gs) != 1 || gs[0].ID != moved.ID || gs[0].State != StateActive {
		t.Fatalf("after the takeover: %v %v, want only group %d ACTIVE", states(gs), err, moved.ID)
	}
}
