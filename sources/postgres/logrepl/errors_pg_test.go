package logrepl

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// TestSlotLifecycle: create, create again (resume: the slot's confirmed
// position), look up, drop, drop again.
func TestSlotLifecycle(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")
	rc := e.replConn(ctx)
	again, err := CreateSlot(ctx, rc, e.slot)
	if err != nil || again != e.start {
		t.Fatalf("CreateSlot on an existing slot = %s, %v; want its confirmed_flush_lsn %s", again, err, e.start)
	}
	s, err := LookupSlot(ctx, rc, e.slot)
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != "logical" || s.Plugin != "pgoutput" || s.ActivePID != 0 || s.WALStatus == "" ||
		s.Database != s.CurrentDatabase || s.ConfirmedFlushLSN != e.start || s.RestartLSN == 0 {
		t.Fatalf("slot = %+v", s)
	}
	for range 2 {
		if err := DropSlot(ctx, rc, e.slot); err != nil {
			t.Fatalf("DropSlot: %v", err)
		}
	}
	_, err = LookupSlot(ctx, e.db.PgConn(), e.slot)
	mustKind(t, err, ErrSlotMissing)
	for _, bad := range []string{"", "Upper", "dash-ed", strings.Repeat("a", 64), "semi;colon"} {
		if _, err := CreateSlot(ctx, rc, bad); err == nil {
			t.Errorf("CreateSlot(%q) accepted", bad)
		}
	}
}

// TestStartErrors checks each start-up failure's kind and one-line message.
func TestStartErrors(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE items (id int PRIMARY KEY)")

	_, err := Start(ctx, e.replConn(ctx), Config{Slot: "no_such_slot"})
	mustKind(t, err, ErrSlotMissing)
	if want := "replication slot no_such_slot does not exist: it was dropped; syncpipe will start a new replication group"; err.Error() != want {
		t.Errorf("message %q\nwant    %q", err, want)
	}

	// The remedy is the one preflight gives (CreatePublicationRemedy):
	// FOR TABLE the stream's tables, never FOR ALL TABLES.
	items := []*Relation{{Namespace: "public", Name: "items"}}
	_, err = Start(ctx, e.replConn(ctx), Config{Slot: e.slot, Publication: "nope", Relations: items})
	mustKind(t, err, ErrPublicationMissing)
	if want := "publication nope does not exist in the source database: run CREATE PUBLICATION nope FOR TABLE public.items"; err.Error() != want {
		t.Errorf("message %q\nwant    %q", err, want)
	}

	s := e.stream(ctx, Config{})
	_, err = Start(ctx, e.replConn(ctx), Config{Slot: e.slot})
	mustKind(t, err, ErrSlotInUse)
	oneLine(t, err, "in use by process ")

	// The same conditions reported by the server itself (a race past the
	// pre-checks) classify the same way.
	rc := e.replConn(ctx)
	err = classify(pglogrepl.StartReplication(ctx, rc, e.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'syncpipe'"}}), e.slot, "syncpipe", nil)
	mustKind(t, err, ErrSlotInUse)
	err = classify(pglogrepl.StartReplication(ctx, e.replConn(ctx), "no_such_slot", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'syncpipe'"}}), "no_such_slot", "syncpipe", nil)
	mustKind(t, err, ErrSlotMissing)

	err = DropSlot(ctx, e.db.PgConn(), e.slot)
	mustKind(t, err, ErrSlotInUse)

	// A publication dropped while streaming fails the stream when the next
	// change is decoded.
	e.exec(ctx, "DROP PUBLICATION syncpipe", "INSERT INTO items VALUES (1)")
	for {
		_, err = s.Next(ctx, quick)
		if err != nil {
			break
		}
	}
	mustKind(t, err, ErrPublicationMissing)
}

// TestSlotMismatch: a physical slot, or a slot of another database, is not
// taken for ours.
func TestSlotMismatch(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t)
	other := newEnv(ctx, t)
	_, err := Start(ctx, e.replConn(ctx), Config{Slot: other.slot})
	mustKind(t, err, ErrSlotMismatch)
	oneLine(t, err, "belongs to database")

	phys := testSlot(t)
	e.exec(ctx, "SELECT pg_create_physical_replication_slot('"+phys+"')")
	t.Cleanup(func() { _ = DropSlot(context.Background(), e.db.PgConn(), phys) })
	_, err = CreateSlot(ctx, e.replConn(ctx), phys)
	mustKind(t, err, ErrSlotMismatch)
	oneLine(t, err, "not a pgoutput logical slot")
}

// TestConnectErrors: unknown role (credentials) and a role without the
// REPLICATION attribute.
func TestConnectErrors(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t)
	as := func(user string) string {
		u, err := url.Parse(e.uri)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(user)
		return u.String()
	}
	_, err := Connect(ctx, as("nobody_here"))
	mustKind(t, err, ErrAuth)
	t.Log(err)
	oneLine(t, err, "check the user and password")

	role := testSlot(t) + "_role"
	e.exec(ctx, "CREATE ROLE "+role+" LOGIN NOREPLICATION")
	t.Cleanup(func() {
		_, _ = e.db.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	_, err = Connect(ctx, as(role))
	mustKind(t, err, ErrReplicationPrivilege)
	t.Log(err)
	oneLine(t, err, "ALTER ROLE "+`"`+role+`"`+" WITH REPLICATION")
}

// oneLine checks an error's message is a single line containing want.
func oneLine(t *testing.T, err error, want string) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, want) {
		t.Errorf("message %q: want one line containing %q", msg, want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%v is not an *Error", err)
	}
}

// TestReceiveTimeout freezes the server-to-client direction of a proxy: the
// stream reports the silence as ErrReceiveTimeout.
func TestReceiveTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t)
	p := newProxy(t, e.uri)
	conn, err := Connect(ctx, p.uri)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	statuses := make(chan LSN, 10)
	s, err := Start(ctx, conn, Config{Slot: e.slot, StatusInterval: 100 * time.Millisecond, ReceiveTimeout: 400 * time.Millisecond,
		OnStatus: func(l LSN) {
			select {
			case statuses <- l:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	<-statuses
	p.freeze()
	for {
		_, err = s.Next(ctx, quick)
		if err != nil {
			break
		}
	}
	mustKind(t, err, ErrReceiveTimeout)
	if err.Error() != "no data from the source for 400ms: reconnecting" {
		t.Errorf("message %q", err)
	}
	if err := s.Close(ctx); err != nil { // a failed stream: Close only stops the reader
		t.Fatalf("Close after a failure: %v", err)
	}
}

// TestSlotLostAgainstPostgres makes the server invalidate a slot
// (max_slot_wal_keep_size) and checks that LookupSlot shows it lost and
// that Start refuses it with ErrSlotLost, naming the slot. It changes a
// server setting, so it runs only on the harness's own cluster and not in
// parallel with the tests that stream.
func TestSlotLostAgainstPostgres(t *testing.T) {
	if pgtest.BinDir(t) == "" {
		t.Skip("changes server settings: only on the harness's own cluster")
	}
	ctx := ctxT(t, 2*time.Minute)
	e := newEnv(ctx, t, "CREATE TABLE t (id serial PRIMARY KEY)")
	e.exec(ctx, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`, `SELECT pg_reload_conf()`)
	t.Cleanup(func() {
		_, _ = e.db.Exec(context.Background(), `ALTER SYSTEM RESET max_slot_wal_keep_size`)
		_, _ = e.db.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	// Each round writes WAL, switches segments and checkpoints; the
	// checkpointer invalidates the slot once it has seen the new setting.
	var s Slot
	for round := 0; round < 30 && s.WALStatus != "lost"; round++ {
		e.exec(ctx, `INSERT INTO t DEFAULT VALUES`, `SELECT pg_switch_wal()`, `CHECKPOINT`)
		var err error
		if s, err = LookupSlot(ctx, e.db.PgConn(), e.slot); err != nil {
			t.Fatal(err)
		}
	}
	if s.WALStatus != "lost" {
		t.Fatalf("slot not invalidated: %+v", s)
	}
	_, err := Start(ctx, e.replConn(ctx), Config{Slot: e.slot, Publication: "syncpipe"})
	mustKind(t, err, ErrSlotLost)
	if !strings.Contains(err.Error(), e.slot) || !strings.Contains(err.Error(), "max_slot_wal_keep_size") {
		t.Errorf("message %q", err)
	}
}
