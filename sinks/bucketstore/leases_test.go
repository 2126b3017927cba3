package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks"
)

func TestLeaseExclusiveAndTakenOverAfterExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openStore(t)
	a, ok, err := s.Leases().AcquireLease(ctx, "group-1/stream", "proc-a", time.Hour)
	if err != nil || !ok {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	if _, ok, err := s.Leases().AcquireLease(ctx, "group-1/stream", "proc-b", time.Hour); err != nil || ok {
		t.Fatalf("second owner got a held lease: %v %v", ok, err)
	}
	again, ok, err := s.Leases().AcquireLease(ctx, "group-1/stream", "proc-a", time.Hour)
	if err != nil || !ok || again.Token != a.Token {
		t.Fatalf("owner re-acquire: %+v %v %v, want token %d", again, ok, err, a.Token)
	}
	if err := s.Leases().RenewLease(ctx, a, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Let a's lease expire (as if proc-a died) and have b take it over.
	if err := s.Leases().RenewLease(ctx, a, -time.Second); err != nil {
		t.Fatal(err)
	}
	b, ok, err := s.Leases().AcquireLease(ctx, "group-1/stream", "proc-b", time.Hour)
	if err != nil || !ok || b.Token <= a.Token {
		t.Fatalf("take-over of an expired lease: %+v %v %v", b, ok, err)
	}
	if err := s.Leases().RenewLease(ctx, a, time.Hour); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old holder renewed a taken-over lease: %v", err)
	}
	if err := s.Leases().ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Leases().AcquireLease(ctx, "group-1/stream", "proc-c", time.Hour); err != nil || !ok {
		t.Fatalf("released lease not free: %v %v", ok, err)
	}
}

// TestFencedWritesStopAtTakeover: a fenced writer's writes and range
// commits go through while its lease holds; once the lease expired and
// another owner took it, they fail with ErrLeaseLost and store nothing.
// A takeover waits for a fenced write in flight, so the new holder sees
// it committed. A released and re-taken lease gets a new token: the old
// one never passes again.
func TestFencedWritesStopAtTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	row := func(i int) []model.Change {
		return []model.Change{{Table: todos, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put("b", "todos", fmt.Sprint(i), `{}`)}}}
	}
	a, ok, err := s.Leases().AcquireLease(ctx, "unit", "proc-a", time.Hour)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	wa, err := s.Writes().NewFencedWriter(ctx, g.ID, FenceOf(a))
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Close()
	if _, err := wa.WriteSnapshot(ctx, row(1)); err != nil {
		t.Fatalf("write under a held lease: %v", err)
	}
	sink := s.Writes().FencedSink(g.ID, FenceOf(a))
	commit := func(k *Sink, rows int64) error {
		return k.Commit(ctx, sinks.Batch{Progress: sinks.Position{Table: "public.todos", Range: 0, LastKey: []string{"1"}, RowsDone: rows}})
	}
	if err := commit(sink, 1); err != nil {
		t.Fatalf("range commit under a held lease: %v", err)
	}

	// The lease runs out while a write is in flight; the takeover waits
	// for that write to commit (it holds the lease row share-locked).
	if err := s.Leases().RenewLease(ctx, a, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	inWrite, finish := make(chan struct{}), make(chan struct{})
	wa.beforeCommit = func() { close(inWrite); <-finish }
	wrote := make(chan error, 1)
	go func() { _, err := wa.WriteSnapshot(ctx, row(2)); wrote <- err }()
	<-inWrite
	waitUntil(t, "the lease to expire", func() bool {
		var expired bool
		err := s.pool.QueryRow(ctx, "SELECT expires_at < now() FROM leases WHERE name = 'unit'").Scan(&expired)
		return err == nil && expired
	})
	type acquired struct {
		l   Lease
		ok  bool
		err error
	}
	took := make(chan acquired, 1)
	go func() {
		l, ok, err := s.Leases().AcquireLease(ctx, "unit", "proc-b", time.Hour)
		took <- acquired{l, ok, err}
	}()
	waitUntil(t, "the takeover to wait for the lease row", func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	})
	select {
	case r := <-took:
		t.Fatalf("takeover returned while a fenced write was in flight: %+v", r)
	default:
	}
	wa.beforeCommit = nil
	close(finish)
	if err := <-wrote; err != nil {
		t.Fatalf("write in flight: %v", err)
	}
	r := <-took
	b, ok, err := r.l, r.ok, r.err
	if err != nil || !ok || b.Token <= a.Token {
		t.Fatalf("take-over: %+v %v %v", b, ok, err)
	}
	before := len(ops(t, s, g.ID))
	if before != 2 {
		t.Fatalf("%d ops after the two writes under the lease, want 2", before)
	}
	if _, err := wa.WriteSnapshot(ctx, row(3)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("write after the takeover: %v, want ErrLeaseLost", err)
	}
	if err := commit(sink, 99); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("range commit after the takeover: %v, want ErrLeaseLost", err)
	}
	if n := len(ops(t, s, g.ID)); n != before {
		t.Fatalf("the fenced-out write stored ops: %d, want %d", n, before)
	}
	pos, _, err := s.Writes().Sink(g.ID).Resume(ctx, "public.todos", 0)
	if err != nil || pos.RowsDone != 1 {
		t.Fatalf("range progress %+v (%v) after the fenced-out commit, want 1 row", pos, err)
	}
	if err := commit(s.Writes().FencedSink(g.ID, FenceOf(b)), 2); err != nil {
		t.Fatalf("the new holder's commit: %v", err)
	}

	// Released and taken again: a new token, and the old ones stay out.
	if err := s.Leases().ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	c, ok, err := s.Leases().AcquireLease(ctx, "unit", "proc-a", time.Hour)
	if err != nil || !ok || c.Token <= b.Token {
		t.Fatalf("re-acquire after release: %+v %v %v, want a token above %d", c, ok, err, b.Token)
	}
	if _, err := wa.WriteSnapshot(ctx, row(4)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a write with the first token after the lease was re-taken: %v", err)
	}
}

// TestStreamCommitFencedAtTakeover: once another process took a stream's
// lease over and read the position to resume from, a commit of the old
// holder records no later position. (It did: the old holder then
// confirmed that position to the source, past where the new holder
// started, and the slot refused the new holder's stream as ahead of
// storage. Found by the torture harness restarting storage.)
func TestStreamCommitFencedAtTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	a, ok, err := s.Leases().AcquireLease(ctx, "stream", "proc-a", time.Hour)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if _, _, err := s.Writes().commitStream(ctx, g.ID, 100, FenceOf(a)); err != nil {
		t.Fatalf("commit under a held lease: %v", err)
	}
	if err := s.Leases().RenewLease(ctx, a, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the lease to expire", func() bool {
		var expired bool
		err := s.pool.QueryRow(ctx, "SELECT expires_at < now() FROM leases WHERE name = 'stream'").Scan(&expired)
		return err == nil && expired
	})
	b, ok, err := s.Leases().AcquireLease(ctx, "stream", "proc-b", time.Hour)
	if err != nil || !ok {
		t.Fatalf("take-over: %v %v", ok, err)
	}
	if _, _, err := s.Writes().commitStream(ctx, g.ID, 200, FenceOf(a)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the old holder's commit after the takeover: %v, want ErrLeaseLost", err)
	}
	resume := func() pglogrepl.LSN {
		t.Helper()
		p, _, err := s.Writes().StreamResume(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		return p.LSN
	}
	if got := resume(); got != 100 {
		t.Fatalf("stream position %s after the fenced-out commit, want 0/64", got)
	}
	if _, _, err := s.Writes().commitStream(ctx, g.ID, 200, FenceOf(b)); err != nil {
		t.Fatalf("the new holder's commit: %v", err)
	}
	if got := resume(); got != 200 {
		t.Fatalf("stream position %s after the new holder's commit, want 0/C8", got)
	}
}

// waitUntil polls cond every 10 ms for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLeaseFreeWhenHolderProcessIsGone: a lease whose holder's storage
// session ended (its process died: the kernel closes its connections) is
// free for another process at once, long before it would expire.
func TestLeaseFreeWhenHolderProcessIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	a, err := Open(ctx, Config{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, Config{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	la, ok, err := a.Leases().AcquireLease(ctx, "unit", "proc-a", time.Hour)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if _, ok, err := b.Leases().AcquireLease(ctx, "unit", "proc-b", time.Hour); err != nil || ok {
		t.Fatalf("took a lease whose holder is alive: %v %v", ok, err)
	}
	a.Close() // the process is gone
	waitUntil(t, "the dead process's lease to be taken", func() bool {
		lb, ok, err := b.Leases().AcquireLease(ctx, "unit", "proc-b", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if ok && lb.Token <= la.Token {
			t.Fatalf("took the lease with token %d, not above %d", lb.Token, la.Token)
		}
		return ok
	})
}
