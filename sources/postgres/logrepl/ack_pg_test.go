package logrepl

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestSlotNeverPassesAck streams with frequent status updates and a caller
// that acknowledges late (each batch only after the next one arrived); the
// slot's confirmed_flush_lsn, read after every status update, must never
// exceed what was acknowledged, and must reach the final acknowledgement.
func TestSlotNeverPassesAck(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	statuses := make(chan LSN, 1000)
	s := e.stream(ctx, Config{StartLSN: e.start, StatusInterval: 20 * time.Millisecond, ReceiveTimeout: 5 * time.Second,
		OnStatus: func(l LSN) {
			select {
			case statuses <- l:
			default:
			}
		}})
	const n = 30
	writer := pgtest.Connect(t, e.uri)
	wrote := make(chan struct{})
	defer func() { <-wrote }()
	go func() {
		defer close(wrote)
		for i := range n {
			if _, err := writer.Exec(ctx, "INSERT INTO items VALUES ("+strconv.Itoa(i)+")"); err != nil {
				t.Errorf("insert: %v", err)
				return
			}
		}
	}()
	var (
		held  []LSN // delivered, not yet acknowledged
		acked = e.start
		rows  int
		check int
	)
	for rows < n {
		b, err := s.Next(ctx, BatchLimits{MaxTxns: 3, MaxWait: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rows += b.Changes
		if b.EndLSN != 0 {
			held = append(held, b.EndLSN)
		}
		if len(held) > 1 { // acknowledge late: everything but the newest batch
			acked = held[len(held)-2]
			s.Ack(acked)
			held = held[len(held)-1:]
		}
		// The slot must lag the acknowledgement, never lead it, and the
		// status updates must only ever report acknowledged positions.
		for drained := false; !drained; {
			select {
			case l := <-statuses:
				if l > acked {
					t.Fatalf("status update reported %s, acknowledged only %s", l, acked)
				}
				check++
			default:
				drained = true
			}
		}
		if got := e.slotLSN(ctx); got > acked {
			t.Fatalf("confirmed_flush_lsn %s > acknowledged %s (batch ending %s not acknowledged)", got, acked, b.EndLSN)
		}
	}
	if check == 0 {
		t.Fatal("no status update was observed")
	}
	if s.Acked() != acked {
		t.Fatalf("Acked() = %s, want %s", s.Acked(), acked)
	}
	waitSlotAt(ctx, t, e, statuses, acked)
	// Ack is monotonic and capped at what was delivered.
	s.Ack(acked - 1)
	s.Ack(held[0] + 1_000_000)
	if s.Acked() != held[0] {
		t.Fatalf("Acked() = %s after a lower and a too-high Ack; want %s", s.Acked(), held[0])
	}
}

// TestResumeFromAcknowledged closes a stream that acknowledged only some
// transactions and restarts from the acknowledged position: the
// acknowledged transactions are not delivered again, the others are.
func TestResumeFromAcknowledged(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	rc := e.replConn(ctx)
	s, err := Start(ctx, rc, Config{Slot: e.slot, StartLSN: e.start})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		e.exec(ctx, fmt.Sprintf("INSERT INTO items VALUES (%d)", i))
	}
	var txns []Txn
	for len(txns) < 4 {
		b, err := s.Next(ctx, BatchLimits{MaxTxns: 1, MaxWait: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		txns = append(txns, b.Txns...)
	}
	s.Ack(txns[1].EndLSN) // rows 1 and 2 durable; 3 and 4 received only
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Next(ctx, quick); err != ErrClosed {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
	// The final status update reached the server and the slot is free.
	slot, err := LookupSlot(ctx, rc, e.slot) // the connection is usable again
	if err != nil {
		t.Fatal(err)
	}
	if slot.ConfirmedFlushLSN != txns[1].EndLSN || slot.ActivePID != 0 {
		t.Fatalf("after Close: confirmed_flush_lsn %s (want %s), active pid %d", slot.ConfirmedFlushLSN, txns[1].EndLSN, slot.ActivePID)
	}

	// Resuming from before the acknowledged position is refused: the slot
	// cannot deliver row 2 again.
	_, err = Start(ctx, e.replConn(ctx), Config{Slot: e.slot, StartLSN: txns[0].EndLSN})
	mustKind(t, err, ErrSlotAhead)
	oneLine(t, err, "already confirmed "+txns[1].EndLSN.String())

	// Restart twice without acknowledging: first from the acknowledged
	// position, then from the slot's own (StartLSN 0). Both deliver rows 3
	// and 4 again, and never 1 or 2. (PostgreSQL does not restart logical
	// streaming on a connection that streamed before: use a new one.)
	for _, start := range []LSN{txns[1].EndLSN, 0} {
		s2, err := Start(ctx, e.replConn(ctx), Config{Slot: e.slot, StartLSN: start})
		if err != nil {
			t.Fatal(err)
		}
		var got []Txn
		for len(got) < 2 {
			b, err := s2.Next(ctx, quick)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b.Txns...)
		}
		for i, tx := range got {
			if v := string(tx.Changes[0].New.Columns[0].Data); v != strconv.Itoa(i+3) {
				t.Fatalf("start %s: resumed transaction %d holds row %s, want %d", start, i, v, i+3)
			}
			if tx.EndLSN != txns[i+2].EndLSN {
				t.Errorf("start %s: resumed txn ends at %s, first delivery at %s", start, tx.EndLSN, txns[i+2].EndLSN)
			}
		}
		if err := s2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseReachesAnIdleReader closes a stream whose reader waits on a
// socket that will stay silent for minutes (status interval and receive
// timeout far off): Close must reach the blocked receive through its read
// deadline at once, and leave the connection usable for a command after
// the final status update.
func TestCloseReachesAnIdleReader(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	rc := e.replConn(ctx)
	s, err := Start(ctx, rc, Config{Slot: e.slot, StartLSN: e.start, StatusInterval: 10 * time.Minute, ReceiveTimeout: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.exec(ctx, "INSERT INTO items VALUES (1)")
	for got := 0; got == 0; {
		b, err := s.Next(ctx, BatchLimits{MaxWait: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		got = b.Changes
		s.Ack(b.EndLSN)
	}
	// The reader now waits for a message that nothing will send.
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Unstopped, the receive waited for the server's next keepalive (about
	// 10 s here); stopped, it returns in well under a millisecond.
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Close took %s: the blocked receive was not interrupted", d)
	}
	if _, err := LookupSlot(ctx, rc, e.slot); err != nil {
		t.Fatalf("connection after Close: %v", err)
	}
}
