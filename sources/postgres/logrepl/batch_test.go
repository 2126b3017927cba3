package logrepl

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeStream is a Stream without a connection: tests push segments as the
// reader would.
func fakeStream(start LSN) *Stream {
	s := &Stream{done: make(chan struct{}), entries: make(chan []segment, 64), delivered: start}
	s.acked.Store(uint64(start))
	s.deliveredMax.Store(uint64(start))
	return s
}

// txnSegs builds the segments of one transaction with n changes, split
// every per changes.
func txnSegs(xid uint32, commit LSN, n, per int) []segment {
	h := &Txn{Xid: xid, BeginLSN: commit - 8, CommitLSN: commit}
	var segs []segment
	for i := 0; i < n || i == 0; i += per {
		s := segment{txn: h, first: i == 0, bytes: 10}
		for j := i; j < min(i+per, n); j++ {
			s.changes = append(s.changes, Change{Kind: Insert, LSN: commit - 4})
		}
		segs = append(segs, s)
	}
	segs[len(segs)-1].last = true
	segs[len(segs)-1].endLSN = commit + 8
	return segs
}

func next(t *testing.T, s *Stream, lim BatchLimits) Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s.Next(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNextSplitsOnlyOversizedTransactions(t *testing.T) {
	s := fakeStream(0x10)
	var segs []segment
	segs = append(segs, txnSegs(1, 0x100, 3, 10)...)
	segs = append(segs, txnSegs(2, 0x200, 25, 10)...) // 3 segments
	segs = append(segs, txnSegs(3, 0x300, 1, 10)...)
	s.entries <- segs
	lim := BatchLimits{MaxChanges: 12, MaxWait: time.Millisecond}

	b := next(t, s, lim) // txn 1 complete; txn 2 would overflow: deliver txn 1 alone
	if len(b.Txns) != 1 || b.Txns[0].Xid != 1 || b.Partial || b.EndLSN != 0x108 {
		t.Fatalf("batch 1 = %+v", b)
	}
	s.Ack(b.EndLSN)
	b = next(t, s, lim) // txn 2 alone exceeds MaxChanges: a partial piece (2 segments)
	if !b.Partial || len(b.Txns) != 1 || b.Txns[0].Xid != 2 || b.EndLSN != 0 || b.Txns[0].EndLSN != 0 ||
		b.Txns[0].Continued || b.Changes != 20 || len(b.Txns[0].Changes) != 20 {
		t.Fatalf("batch 2 = %+v", b)
	}
	s.Ack(0x250) // beyond anything delivered: capped
	if s.Acked() != 0x108 {
		t.Fatalf("Acked = %s, want 0x108", s.Acked())
	}
	b = next(t, s, lim) // the rest of txn 2, then txn 3
	if b.Partial || len(b.Txns) != 2 || b.EndLSN != 0x308 || b.Changes != 6 {
		t.Fatalf("batch 3 = %+v", b)
	}
	if t2 := b.Txns[0]; t2.Xid != 2 || !t2.Continued || len(t2.Changes) != 5 || t2.EndLSN != 0x208 || t2.CommitLSN != 0x200 {
		t.Fatalf("last piece of txn 2 = %+v", t2)
	}
	if t3 := b.Txns[1]; t3.Xid != 3 || t3.Continued || len(t3.Changes) != 1 {
		t.Fatalf("txn 3 = %+v", t3)
	}
}

func TestNextIdlePositions(t *testing.T) {
	s := fakeStream(0x100)
	s.entries <- []segment{{pos: 0x80}} // behind the start: nothing to return
	s.entries <- []segment{{pos: 0x180}}
	b := next(t, s, BatchLimits{MaxWait: time.Millisecond})
	if len(b.Txns) != 0 || b.EndLSN != 0x180 {
		t.Fatalf("idle batch = %+v", b)
	}
	// A position after a transaction extends that batch.
	s.entries <- append(txnSegs(1, 0x200, 1, 10), segment{pos: 0x300})
	b = next(t, s, BatchLimits{MaxWait: time.Millisecond})
	if len(b.Txns) != 1 || b.EndLSN != 0x300 {
		t.Fatalf("batch = %+v", b)
	}
	// The same position again is not returned: Next waits instead.
	s.entries <- []segment{{pos: 0x300}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if b, err := s.Next(ctx, BatchLimits{MaxWait: time.Millisecond}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %+v, %v; want to keep waiting", b, err)
	}
}

func TestNextKeepsWorkOfCancelledCall(t *testing.T) {
	s := fakeStream(0)
	s.entries <- txnSegs(1, 0x100, 2, 10)
	// The entry is buffered before the call, so Next takes it and then
	// waits for a second transaction until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Next(ctx, BatchLimits{MaxTxns: 5, MaxWait: time.Hour}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v", err)
	}
	s.entries <- txnSegs(2, 0x200, 1, 10)
	b := next(t, s, BatchLimits{MaxTxns: 2, MaxWait: time.Hour})
	if len(b.Txns) != 2 || b.Txns[0].Xid != 1 || b.Txns[1].Xid != 2 {
		t.Fatalf("batch = %+v", b)
	}
}

func TestNextDrainsThenReportsError(t *testing.T) {
	s := fakeStream(0)
	s.entries <- txnSegs(1, 0x100, 1, 10)
	s.entries <- txnSegs(2, 0x200, 30, 10)[:1] // a transaction cut off by the failure
	s.err = &Error{Kind: ErrReceiveTimeout, Msg: "no data"}
	close(s.done)
	b := next(t, s, BatchLimits{MaxWait: time.Hour})
	if len(b.Txns) != 1 || b.Txns[0].Xid != 1 {
		t.Fatalf("batch = %+v", b)
	}
	_, err := s.Next(context.Background(), BatchLimits{})
	mustKind(t, err, ErrReceiveTimeout)

	closed := fakeStream(0)
	close(closed.done)
	if _, err := closed.Next(context.Background(), BatchLimits{}); err != ErrClosed {
		t.Fatalf("Next on a closed stream = %v", err)
	}
}

// TestNextEager: an eager Next returns what is waiting at once, however
// long MaxWait is, and takes everything queued by then into one batch.
func TestNextEager(t *testing.T) {
	s := fakeStream(0)
	s.entries <- txnSegs(1, 0x100, 2, 10)
	s.entries <- txnSegs(2, 0x200, 1, 10)
	lim := BatchLimits{MaxWait: time.Hour, Eager: true}
	b := next(t, s, lim) // the test's deadline is 10 s: an hour's wait fails it
	if len(b.Txns) != 2 || b.Txns[0].Xid != 1 || b.Txns[1].Xid != 2 || b.EndLSN != 0x208 {
		t.Fatalf("batch = %+v", b)
	}
	// An idle position is passed on at once too.
	s.entries <- []segment{{pos: 0x300}}
	if b = next(t, s, lim); len(b.Txns) != 0 || b.EndLSN != 0x300 {
		t.Fatalf("idle batch = %+v", b)
	}
	// A transaction still arriving is not returned: Next waits for its end.
	s.entries <- txnSegs(3, 0x400, 30, 10)[:2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if b, err := s.Next(ctx, lim); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %+v, %v; want to wait for the transaction's end", b, err)
	}
}
