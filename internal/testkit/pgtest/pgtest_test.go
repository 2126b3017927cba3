package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLogicalReplicationThroughHarness proves the harness runs a real server
// with logical decoding: a pgoutput slot streams an INSERT made after it.
func TestLogicalReplicationThroughHarness(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	uri := pgtest.NewDB(t)
	conn := pgtest.Connect(t, uri)

	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil || walLevel != "logical" {
		t.Fatalf("wal_level = %q (%v), want logical", walLevel, err)
	}
	for _, q := range []string{
		"CREATE TABLE items (id int PRIMARY KEY, name text)",
		"CREATE PUBLICATION pub FOR TABLE items",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	rconn, err := pgconn.Connect(ctx, pgtest.ReplicationURI(uri))
	if err != nil {
		t.Fatalf("replication connect: %v", err)
	}
	defer rconn.Close(context.Background())
	slot, err := pglogrepl.CreateReplicationSlot(ctx, rconn, "harness_slot", "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		t.Fatalf("create slot: %v", err)
	}
	start, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatalf("parse consistent point: %v", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO items VALUES (42, 'answer')"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	err = pglogrepl.StartReplication(ctx, rconn, "harness_slot", start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'pub'"},
	})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}

	relations := map[uint32]*pglogrepl.RelationMessage{}
	for {
		msg, err := rconn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatalf("parse xlogdata: %v", err)
		}
		lm, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatalf("parse pgoutput: %v", err)
		}
		switch m := lm.(type) {
		case *pglogrepl.RelationMessage:
			relations[m.RelationID] = m
		case *pglogrepl.InsertMessage:
			rel := relations[m.RelationID]
			if rel == nil || rel.RelationName != "items" {
				t.Fatalf("insert for unknown relation %d", m.RelationID)
			}
			got := map[string]string{}
			for i, col := range m.Tuple.Columns {
				got[rel.Columns[i].Name] = string(col.Data)
			}
			if got["id"] != "42" || got["name"] != "answer" {
				t.Fatalf("decoded row = %v, want id=42 name=answer", got)
			}
			return
		}
	}
}

// TestDatabasesAreIsolated checks that two tests get distinct databases.
func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.NewDB(t), pgtest.NewDB(t)
	if a == b {
		t.Fatalf("NewDB returned the same database twice: %s", a)
	}
	ca, cb := pgtest.Connect(t, a), pgtest.Connect(t, b)
	if _, err := ca.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("table created in database a is visible in database b")
	}
}
