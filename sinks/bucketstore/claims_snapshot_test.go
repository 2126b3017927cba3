package bucketstore

import (
	"context"
	"testing"
)

// TestDropDeadKeepsNewWritersClaims: a checkpoint commit reads the live
// writers' claims (liveLowSQL) and, later in the same transaction, drops
// the claims of dead connections (dropDeadSQL). PostgreSQL takes the
// backend list of pg_stat_activity once per transaction, at its first
// use: a writer whose connection opened after that read, and who claimed
// ids in between, was not in the list and lost its claim — found by CI
// (TestActiveStreamKeepsUpWhileReprocessing: "lease stream/1 (token 1) is
// no longer held" on a write after a reload opened more connections). A
// fenced writer then rolls back and retries; an unfenced one would commit
// ids a checkpoint may already have passed.
func TestDropDeadKeepsNewWritersClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var low *int64
	if err := tx.QueryRow(ctx, liveLowSQL, g.ID).Scan(&low); err != nil {
		t.Fatal(err)
	}
	// A writer on a connection opened now: another store's pool has none
	// yet.
	s2, err := Open(ctx, Config{URI: s.pool.Config().ConnString(), Schema: s.schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	w, err := s2.Writes().NewWriter(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var claim int64
	if err := w.conn.QueryRow(ctx, reserveSQL, g.ID).Scan(&claim); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, clearStatusSQL); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, dropDeadSQL, g.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM op_reservations WHERE id = $1`, claim).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the live writer's claim: %d rows (%v), want 1 — dropped as dead", n, err)
	}
}
