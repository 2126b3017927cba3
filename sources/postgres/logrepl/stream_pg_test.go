package logrepl

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestBatchesHoldWholeTransactions commits five 3-row transactions and reads
// them with MaxTxns 2: batches of 2, 2 and 1 transactions, none split. The
// first two calls wait up to 30 s, so only MaxTxns can end them however
// slowly a loaded machine's walsender sends; the last ends on MaxWait.
func TestBatchesHoldWholeTransactions(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 2*time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY, txn int)")
	s := e.stream(ctx, Config{StartLSN: e.start})
	for i := range 5 {
		e.txn(ctx,
			fmt.Sprintf("INSERT INTO items VALUES (%d, %d)", 3*i, i),
			fmt.Sprintf("INSERT INTO items VALUES (%d, %d)", 3*i+1, i),
			fmt.Sprintf("INSERT INTO items VALUES (%d, %d)", 3*i+2, i))
	}
	var sizes []int
	next := 0
	for next < 5 {
		lim := BatchLimits{MaxTxns: 2, MaxWait: 30 * time.Second}
		if next == 4 {
			lim.MaxWait = 300 * time.Millisecond
		}
		b, err := s.Next(ctx, lim)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Txns) == 0 {
			continue // idle advance
		}
		if b.Partial || len(b.Txns) > 2 {
			t.Fatalf("batch partial=%v with %d txns", b.Partial, len(b.Txns))
		}
		sizes = append(sizes, len(b.Txns))
		// EndLSN is the last transaction's end, or a later idle position
		// (keepalive WAL end) that arrived after it.
		if b.EndLSN < b.Txns[len(b.Txns)-1].EndLSN || b.Changes != 3*len(b.Txns) {
			t.Errorf("batch EndLSN %s, last txn end %s, changes %d", b.EndLSN, b.Txns[len(b.Txns)-1].EndLSN, b.Changes)
		}
		for _, tx := range b.Txns {
			if len(tx.Changes) != 3 || tx.Continued {
				t.Fatalf("txn %d has %d changes (continued %v)", next, len(tx.Changes), tx.Continued)
			}
			for _, c := range tx.Changes {
				if got := string(c.New.Columns[1].Data); got != strconv.Itoa(next) {
					t.Fatalf("txn %d holds a row of txn %s", next, got)
				}
			}
			next++
		}
		s.Ack(b.EndLSN)
	}
	if fmt.Sprint(sizes) != "[2 2 1]" {
		t.Errorf("batch sizes %v, want [2 2 1]", sizes)
	}
}

// TestLargeTransactionComesInPartialBatches checks the one exception to
// whole-transaction batches: a transaction larger than MaxChanges.
func TestLargeTransactionComesInPartialBatches(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	s := e.stream(ctx, Config{StartLSN: e.start, segmentChanges: 10})
	e.exec(ctx, "INSERT INTO items SELECT generate_series(1, 50)", "INSERT INTO items VALUES (51)")
	lim := BatchLimits{MaxChanges: 20, MaxWait: 50 * time.Millisecond}
	var got []int
	var partials int
	for len(got) < 51 {
		b, err := s.Next(ctx, lim)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case b.Partial:
			partials++
			if len(b.Txns) != 1 || b.EndLSN != 0 || b.Txns[0].EndLSN != 0 || len(b.Txns[0].Changes) < 20 {
				t.Fatalf("partial batch: %d txns, EndLSN %s, %d changes", len(b.Txns), b.EndLSN, b.Changes)
			}
			if b.Txns[0].Continued != (partials > 1) {
				t.Errorf("partial %d: Continued = %v", partials, b.Txns[0].Continued)
			}
		case len(b.Txns) > 0:
			if b.Txns[0].EndLSN == 0 || b.EndLSN < b.Txns[0].EndLSN {
				t.Errorf("final piece EndLSN %s / batch %s", b.Txns[0].EndLSN, b.EndLSN)
			}
			if len(got) < 50 && !b.Txns[0].Continued {
				t.Errorf("final piece of the large transaction not marked Continued")
			}
		}
		for _, tx := range b.Txns {
			for _, c := range tx.Changes {
				n, _ := strconv.Atoi(string(c.New.Columns[0].Data))
				got = append(got, n)
			}
		}
		s.Ack(b.EndLSN)
	}
	if partials != 2 {
		t.Errorf("%d partial batches, want 2 (50 changes, 20 per batch)", partials)
	}
	for i, n := range got {
		if n != i+1 {
			t.Fatalf("change %d is row %d: order lost", i, n)
		}
	}
}

// TestRelationChangeSurfacesBeforeTheChange alters a table and checks that
// the new shape is announced in the transaction, before the insert that
// uses it, while an unchanged resend (after SET STATISTICS) is not.
func TestRelationChangeSurfacesBeforeTheChange(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY, name text)")
	s := e.stream(ctx, Config{StartLSN: e.start})
	e.exec(ctx,
		"INSERT INTO items VALUES (1, 'a')",
		"ALTER TABLE items ALTER COLUMN name SET STATISTICS 500", // relcache reset, same shape
		"INSERT INTO items VALUES (2, 'b')",
		"ALTER TABLE items ADD COLUMN extra int",
		"INSERT INTO items VALUES (3, 'c', 33)",
		"ALTER TABLE items REPLICA IDENTITY FULL",
		"DELETE FROM items WHERE id = 3",
	)
	txns := collect(ctx, t, s, 4, quick)
	if n := len(txns[1].Changes); n != 1 {
		t.Errorf("unchanged resend surfaced: txn 2 has %d changes", n)
	}
	add := txns[2].Changes
	if len(add) != 2 || add[0].Kind != RelationChanged || add[1].Kind != Insert {
		t.Fatalf("ADD COLUMN txn = %v", kinds(add))
	}
	if len(add[0].Previous.Columns) != 2 || len(add[0].Relation.Columns) != 3 || add[0].Relation != add[1].Relation {
		t.Errorf("relation change %d -> %d columns; insert uses the new relation: %v",
			len(add[0].Previous.Columns), len(add[0].Relation.Columns), add[0].Relation == add[1].Relation)
	}
	if got := row(add[1].Relation, add[1].New); got["extra"] != "33" {
		t.Errorf("insert after ADD COLUMN = %v", got)
	}
	ri := txns[3].Changes
	if len(ri) != 2 || ri[0].Kind != RelationChanged || ri[0].Relation.ReplicaIdentity != IdentityFull ||
		ri[0].Previous.ReplicaIdentity != IdentityDefault || ri[1].OldKind != OldFull {
		t.Fatalf("REPLICA IDENTITY FULL txn = %v", kinds(ri))
	}
}

func kinds(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Kind.String())
	}
	return out
}

// TestSeededRelationCacheSeesOfflineChange: a shape passed in
// Config.Relations (e.g. the snapshot's) is compared with the first
// description the server sends.
func TestSeededRelationCacheSeesOfflineChange(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	var oid uint32
	if err := e.db.QueryRow(ctx, "SELECT 'items'::regclass::oid").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	old := &Relation{ID: oid, Namespace: "public", Name: "items", ReplicaIdentity: IdentityDefault,
		Columns: []Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}}}
	e.exec(ctx, "ALTER TABLE items ADD COLUMN extra text", "INSERT INTO items VALUES (1, 'x')")
	s := e.stream(ctx, Config{StartLSN: e.start, Relations: []*Relation{old}})
	cs := collect(ctx, t, s, 1, quick)[0].Changes
	if len(cs) != 2 || cs[0].Kind != RelationChanged || cs[0].Previous != old {
		t.Fatalf("changes = %v", kinds(cs))
	}
}

// TestIdleAdvancePassesHeartbeat: with no published change, a heartbeat
// message (and the keepalive WAL end) still yields a position to
// acknowledge, and acknowledging it moves the slot.
func TestIdleAdvancePassesHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	statuses := make(chan LSN, 100)
	s := e.stream(ctx, Config{StartLSN: e.start, StatusInterval: 50 * time.Millisecond, ReceiveTimeout: 5 * time.Second,
		OnStatus: func(l LSN) {
			select {
			case statuses <- l:
			default:
			}
		}})
	e.exec(ctx, "CREATE TABLE unpublished_later (x int)") // DDL: WAL but no change
	hb, err := Heartbeat(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	var end LSN
	for end < hb {
		b, err := s.Next(ctx, quick)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Txns) != 0 || b.EndLSN <= end {
			t.Fatalf("idle batch: %d txns, EndLSN %s after %s", len(b.Txns), b.EndLSN, end)
		}
		end = b.EndLSN
		s.Ack(end)
	}
	waitSlotAt(ctx, t, e, statuses, end)
}

// waitSlotAt waits (status update by status update) until the slot's
// confirmed_flush_lsn is want, failing if it ever exceeds it.
func waitSlotAt(ctx context.Context, t *testing.T, e *env, statuses <-chan LSN, want LSN) {
	t.Helper()
	for {
		got := e.slotLSN(ctx)
		if got > want {
			t.Fatalf("confirmed_flush_lsn %s passed the acknowledged %s", got, want)
		}
		if got == want {
			return
		}
		select {
		case <-statuses:
		case <-ctx.Done():
			t.Fatalf("confirmed_flush_lsn stuck at %s, want %s", got, want)
		}
	}
}

// TestHeartbeatLoopStops checks RunHeartbeat emits and returns nil on cancel.
func TestHeartbeatLoopStops(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t)
	s := e.stream(ctx, Config{StartLSN: e.start})
	hctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- RunHeartbeat(hctx, e.db, time.Hour) }()
	b, err := s.Next(ctx, quick) // the first heartbeat shows up as an idle position
	if err != nil || len(b.Txns) != 0 || b.EndLSN <= e.start {
		t.Fatalf("Next = %+v, %v", b, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("RunHeartbeat: %v", err)
	}
}
