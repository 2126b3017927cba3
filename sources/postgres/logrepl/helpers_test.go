package logrepl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testSlot is the slot name every integration test uses (each test has a
// database of its own, but slots are cluster-wide, so names get a suffix).
func testSlot(t *testing.T) string {
	return fmt.Sprintf("logrepl_%d_%d", os.Getpid(), slotSeq.Add(1))
}

var slotSeq atomic.Int64

// env is one test's source database with a publication and a slot.
type env struct {
	t     *testing.T
	uri   string
	db    *pgx.Conn
	slot  string
	start LSN // the slot's consistent point
}

// newEnv creates the database, runs ddl, publishes all tables as
// "syncpipe" and creates the slot.
func newEnv(ctx context.Context, t *testing.T, ddl ...string) *env {
	t.Helper()
	e := &env{t: t, uri: pgtest.NewDB(t), slot: testSlot(t)}
	e.db = pgtest.Connect(t, e.uri)
	e.exec(ctx, ddl...)
	e.exec(ctx, "CREATE PUBLICATION syncpipe FOR ALL TABLES")
	rc := e.replConn(ctx)
	var err error
	if e.start, err = CreateSlot(ctx, rc, e.slot); err != nil {
		t.Fatalf("CreateSlot: %v", err)
	}
	return e
}

func (e *env) exec(ctx context.Context, sqls ...string) {
	e.t.Helper()
	for _, q := range sqls {
		if _, err := e.db.Exec(ctx, q); err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
	}
}

// txn runs sqls in one transaction.
func (e *env) txn(ctx context.Context, sqls ...string) {
	e.t.Helper()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, q := range sqls {
		if _, err := tx.Exec(ctx, q); err != nil {
			e.t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// replConn opens a replication connection closed at the end of the test.
func (e *env) replConn(ctx context.Context) *pgconn.PgConn {
	e.t.Helper()
	c, err := Connect(ctx, e.uri)
	if err != nil {
		e.t.Fatalf("Connect: %v", err)
	}
	e.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// stream starts a stream on a new connection; it is closed at test end.
func (e *env) stream(ctx context.Context, cfg Config) *Stream {
	e.t.Helper()
	if cfg.Slot == "" {
		cfg.Slot = e.slot
	}
	s, err := Start(ctx, e.replConn(ctx), cfg)
	if err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	e.t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	})
	return s
}

// slotLSN reads the slot's confirmed_flush_lsn through the normal connection.
func (e *env) slotLSN(ctx context.Context) LSN {
	e.t.Helper()
	s, err := LookupSlot(ctx, e.db.PgConn(), e.slot)
	if err != nil {
		e.t.Fatalf("LookupSlot: %v", err)
	}
	return s.ConfirmedFlushLSN
}

// collect calls Next until it has n transactions (acknowledging each batch
// at once) and returns them.
func collect(ctx context.Context, t *testing.T, s *Stream, n int, lim BatchLimits) []Txn {
	t.Helper()
	var txns []Txn
	for len(txns) < n {
		b, err := s.Next(ctx, lim)
		if err != nil {
			t.Fatalf("Next after %d of %d transactions: %v", len(txns), n, err)
		}
		txns = append(txns, b.Txns...)
		s.Ack(b.EndLSN)
	}
	if len(txns) != n {
		t.Fatalf("got %d transactions, want %d", len(txns), n)
	}
	return txns
}

// dml returns the row changes of txns (without RelationChanged).
func dml(txns []Txn) []Change {
	var out []Change
	for _, t := range txns {
		for _, c := range t.Changes {
			if c.Kind != RelationChanged {
				out = append(out, c)
			}
		}
	}
	return out
}

// row renders a tuple as name=value pairs ("NULL", "TOAST" for 'n', 'u').
func row(rel *Relation, tp Tuple) map[string]string {
	m := map[string]string{}
	for i, c := range tp.Columns {
		v := string(c.Data)
		switch c.Kind {
		case ColNull:
			v = "NULL"
		case ColUnchanged:
			v = "TOAST"
		}
		m[rel.Columns[i].Name] = v
	}
	return m
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustKind(t *testing.T, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v; want kind %v", err, kind)
	}
}
