package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/model"
)

// waitFor reads ch until a checkpoint satisfies ok; the timeout only turns a
// hang into a failure.
func waitFor(t testing.TB, ch <-chan Checkpoint, what string, ok func(Checkpoint) bool) Checkpoint {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case cp, open := <-ch:
			if !open {
				t.Fatalf("waiting for %s: channel closed", what)
			}
			if ok(cp) {
				return cp
			}
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// writeRows writes n rows into bucket and returns the last op id.
func writeRows(t testing.TB, w *Writer, tb *model.Table, first, n int) int64 {
	t.Helper()
	var cs []model.Change
	for i := first; i < first+n; i++ {
		cs = append(cs, model.Change{Table: tb, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put(`1#global[]`, "todos", fmt.Sprint(i), `{}`)}})
	}
	res, err := w.WriteChanges(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	return res.MaxOpID
}

func TestActiveCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	if _, _, ok, err := s.Reader().ActiveCheckpoint(ctx); ok || err != nil {
		t.Fatalf("before any checkpoint: ok=%v err=%v", ok, err)
	}
	want := publishAt(t, s, g.ID, 0x1_0000_0010, writeRows(t, w, todos, 0, 3))
	cp, grp, ok, err := s.Reader().ActiveCheckpoint(ctx)
	if err != nil || !ok || cp != want || grp.ID != g.ID || grp.State != StateActive {
		t.Fatalf("got %+v %d/%s ok=%v err=%v, want %+v", cp, grp.ID, grp.State, ok, err, want)
	}
}

// TestWatchFanOutAndCoalescing: a Commit in another goroutine reaches 3
// subscribers; a subscriber that does not read while 5 checkpoints are
// published finds only the newest when it reads.
func TestWatchFanOutAndCoalescing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	watcher := s.Reader().WatchCheckpoints(ctx)
	slow := watcher.Subscribe(ctx)
	subs := []<-chan Checkpoint{watcher.Subscribe(ctx), watcher.Subscribe(ctx), watcher.Subscribe(ctx)}

	last := writeRows(t, w, todos, 0, 5)
	committed := make(chan Checkpoint, 1)
	go func() {
		cp, _, _ := s.Writes().Commit(ctx, g.ID, 100, last)
		committed <- cp
	}()
	for i, ch := range subs {
		got := waitFor(t, ch, fmt.Sprintf("subscriber %d: first checkpoint", i), func(cp Checkpoint) bool { return cp.OpID == last })
		if got.GroupID != g.ID || got.LSN != 100 || got.LSNText != "0/64" {
			t.Fatalf("subscriber %d got %+v", i, got)
		}
	}
	if cp := <-committed; cp.OpID != last {
		t.Fatalf("commit published %+v", cp)
	}
	// Five more checkpoints, one of them moving only the LSN.
	var final Checkpoint
	for i := range 5 {
		op := writeRows(t, w, todos, 100+i*10, 2)
		if i == 3 {
			op = 0
		}
		final = publishAt(t, s, g.ID, uint64(200+i), op)
		waitFor(t, subs[0], "checkpoint "+fmt.Sprint(i), func(cp Checkpoint) bool { return cp == final })
	}
	// Once Latest reports it, every subscriber has been offered it.
	if cp, ok := watcher.Latest(); !ok || cp != final {
		t.Fatalf("Latest = %+v %v, want %+v", cp, ok, final)
	}
	if cp := <-slow; cp != final {
		t.Fatalf("slow subscriber read %+v, want only the newest %+v", cp, final)
	}
	select {
	case cp := <-slow:
		t.Fatalf("slow subscriber has a second value %+v", cp)
	default:
	}
	// A late subscriber gets the current checkpoint at once.
	if cp := <-watcher.Subscribe(ctx); cp != final {
		t.Fatalf("late subscriber got %+v", cp)
	}
	// Ending a subscription closes its channel; ending the watcher closes
	// the rest.
	subCtx, subCancel := context.WithCancel(ctx)
	ch := watcher.Subscribe(subCtx)
	<-ch
	subCancel()
	if _, open := <-ch; open {
		t.Fatal("subscription channel open after its context ended")
	}
	cancel()
	<-watcher.Done()
	for _, ch := range subs {
		for range ch {
		}
	}
}

// TestWatchReconnectsAndFollowsGroupSwitch kills the watcher's connection:
// it reconnects and re-reads, so a checkpoint published meanwhile is still
// delivered. Then a new group takes over and its checkpoints are
// delivered, the stopped group's are not.
func TestWatchReconnectsAndFollowsGroupSwitch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	first := publishAt(t, s, g.ID, 100, writeRows(t, w, todos, 0, 3))
	watcher := s.Reader().WatchCheckpoints(ctx)
	sub := watcher.Subscribe(ctx)
	waitFor(t, sub, "initial checkpoint", func(cp Checkpoint) bool { return cp == first })

	// Terminate the LISTEN connection and wait until it is gone.
	var pids []int32
	rows, err := s.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, watchAppName)
	if err == nil {
		for rows.Next() {
			var pid int32
			if err = rows.Scan(&pid); err != nil {
				break
			}
			pids = append(pids, pid)
		}
		rows.Close()
	}
	if err != nil || len(pids) != 1 {
		t.Fatalf("watcher connections %v (%v), want 1", pids, err)
	}
	var killed bool
	if err := s.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pids[0]).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate watcher connection: %v %v", killed, err)
	}
	second := publishAt(t, s, g.ID, 200, writeRows(t, w, todos, 10, 3))
	waitFor(t, sub, "checkpoint published while disconnected", func(cp Checkpoint) bool { return cp == second })
	if watcher.Reconnects() < 1 {
		t.Fatal("no reconnect counted")
	}

	// A new rules version takes over.
	g2, err := s.Catalog().CreateGroup(ctx, "bucket_definitions: {v2: {}}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	w2 := newWriter(t, s, g2.ID)
	todos2 := registerTable(t, s, g2.ID, "todos")
	readyGroup(t, s, g2.ID, todos2)
	third := publishAt(t, s, g2.ID, 300, writeRows(t, w2, todos2, 0, 3))
	waitFor(t, sub, "new group's checkpoint", func(cp Checkpoint) bool { return cp == third })
	// The stopped group's writer still writes, but its checkpoint is
	// refused (its replication ends there); the next value must be the
	// active group's.
	if _, ok, err := s.Writes().Commit(ctx, g.ID, 400, writeRows(t, w, todos, 20, 3)); ok || !errors.Is(err, ErrGroupStopped) {
		t.Fatalf("commit of the stopped group: published %v, err %v; want ErrGroupStopped", ok, err)
	}
	fourth := publishAt(t, s, g2.ID, 400, writeRows(t, w2, todos2, 10, 3))
	if got := waitFor(t, sub, "next checkpoint", func(Checkpoint) bool { return true }); got != fourth {
		t.Fatalf("after a stopped group's commit got %+v, want %+v", got, fourth)
	}
}
