package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

func preflightSetup(t *testing.T) (*pgx.Conn, string) {
	conn, uri := testDB(t)
	mustExec(t, conn,
		`CREATE TABLE a (id int PRIMARY KEY, v text)`,
		`CREATE TABLE b (id int PRIMARY KEY, v text)`)
	return conn, uri
}

// errorLines returns the lines of a joined error (none for nil).
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func wantLines(t *testing.T, err error, want ...string) {
	t.Helper()
	got := errorLines(err)
	if len(got) != len(want) {
		t.Fatalf("got %d error lines, want %d:\n%v", len(got), len(want), err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got  %s\n want %s", i, got[i], want[i])
		}
	}
}

func TestPreflightOK(t *testing.T) {
	t.Parallel()
	conn, _ := preflightSetup(t)
	mustExec(t, conn, `CREATE PUBLICATION syncpipe FOR TABLE a, b`)
	if err := Preflight(testCtx(t), conn, PreflightOptions{Tables: []string{"a", "public.b"}}); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn, `CREATE PUBLICATION everything FOR ALL TABLES`)
	if err := Preflight(testCtx(t), conn, PreflightOptions{Publication: "everything", Tables: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
}

func TestPreflightMissingPublication(t *testing.T) {
	t.Parallel()
	conn, _ := preflightSetup(t)
	opts := PreflightOptions{Tables: []string{"a", "b"}}
	err := Preflight(testCtx(t), conn, opts)
	wantLines(t, err, "publication syncpipe does not exist in the source database: run CREATE PUBLICATION syncpipe FOR TABLE public.a, public.b")
	if !errors.Is(err, ErrPublication) {
		t.Error("not ErrPublication")
	}
	// No table of the rules exists: nothing to create it for yet.
	none := PreflightOptions{Tables: []string{"gone"}, CreatePublication: true}
	if err := Preflight(testCtx(t), conn, none); !strings.Contains(err.Error(),
		"publication syncpipe does not exist, and none of the sync rules' tables exists in the source database to create it for: create the tables") {
		t.Fatalf("with CreatePublication and no table: %v", err)
	}
	// A dry run says the publication could be created, and creates none.
	dry := PreflightOptions{Tables: opts.Tables, CreatePublication: true, DryRun: true}
	if err := Preflight(testCtx(t), conn, dry); err != nil {
		t.Fatalf("dry run with CreatePublication: %v", err)
	}
	if err := Preflight(testCtx(t), conn, opts); !errors.Is(err, ErrPublication) {
		t.Fatalf("after a dry run: %v, want the publication still missing", err)
	}
	opts.CreatePublication = true
	if err := Preflight(testCtx(t), conn, opts); err != nil {
		t.Fatalf("with CreatePublication: %v", err)
	}
	opts.CreatePublication = false
	if err := Preflight(testCtx(t), conn, opts); err != nil {
		t.Fatalf("after creating the publication: %v", err)
	}
}

// TestPreflightManagedPublication: tables later rules add go into a
// publication syncpipe created, never into someone else's.
func TestPreflightManagedPublication(t *testing.T) {
	t.Parallel()
	conn, _ := preflightSetup(t)
	mustExec(t, conn, `CREATE TABLE c (id int PRIMARY KEY)`)
	if err := Preflight(testCtx(t), conn, PreflightOptions{Tables: []string{"a"}, CreatePublication: true}); err != nil {
		t.Fatal(err)
	}
	more := PreflightOptions{Tables: []string{"a", "b", "c"}}
	wantLines(t, Preflight(testCtx(t), conn, more),
		"tables public.b, public.c are not in publication syncpipe: run ALTER PUBLICATION syncpipe ADD TABLE public.b, public.c")
	more.CreatePublication = true
	if err := Preflight(testCtx(t), conn, more); err != nil {
		t.Fatalf("adding tables to the publication syncpipe created: %v", err)
	}
	more.CreatePublication = false
	if err := Preflight(testCtx(t), conn, more); err != nil {
		t.Fatalf("after adding the tables: %v", err)
	}

	mustExec(t, conn, `CREATE PUBLICATION theirs FOR TABLE a`)
	theirs := PreflightOptions{Publication: "theirs", Tables: []string{"a", "b"}, CreatePublication: true}
	wantLines(t, Preflight(testCtx(t), conn, theirs),
		"table public.b is not in publication theirs: run ALTER PUBLICATION theirs ADD TABLE public.b")
}

func TestPreflightPublicationSettings(t *testing.T) {
	t.Parallel()
	conn, _ := preflightSetup(t)
	mustExec(t, conn,
		`CREATE TABLE c (id int PRIMARY KEY, v text, w text)`,
		`CREATE TABLE d (id int PRIMARY KEY, v text)`,
		`CREATE PUBLICATION p FOR TABLE a, c (id, v), d WHERE (id > 0) WITH (publish = 'insert, update', publish_via_partition_root = true)`)
	err := Preflight(testCtx(t), conn, PreflightOptions{Publication: "p", Tables: []string{"a", "b", "c", "d", "zzz"}})
	wantLines(t, err,
		"table public.zzz from the sync rules does not exist in the source database (check the name and schema)",
		"publication p does not publish delete, truncate: run ALTER PUBLICATION p SET (publish = 'insert, update, delete, truncate')",
		"publication p publishes partition changes via the partition root, which syncpipe does not support: run ALTER PUBLICATION p SET (publish_via_partition_root = false)",
		"publication p publishes table public.c with a column list, so changes would be incomplete: run ALTER PUBLICATION p SET TABLE … listing public.c without WHERE or column list (or DROP TABLE then ADD TABLE public.c)",
		"publication p publishes table public.d with a row filter, so changes would be incomplete: run ALTER PUBLICATION p SET TABLE … listing public.d without WHERE or column list (or DROP TABLE then ADD TABLE public.d)",
		"table public.b is not in publication p: run ALTER PUBLICATION p ADD TABLE public.b",
	)
	mustExec(t, conn, `CREATE PUBLICATION "Q" FOR TABLE a`)
	err = Preflight(testCtx(t), conn, PreflightOptions{Publication: "Q", Tables: []string{"a", "b", "c"}})
	wantLines(t, err, `tables public.b, public.c are not in publication "Q": run ALTER PUBLICATION "Q" ADD TABLE public.b, public.c`)
}

var roleSeq atomic.Int64

// limitedRole creates a LOGIN role without REPLICATION (dropped at the end)
// and returns a connection as it, or skips when the server does not let the
// test log in as a new role without a password.
func limitedRole(t *testing.T, conn *pgx.Conn, uri string) *pgx.Conn {
	t.Helper()
	var db string
	if err := conn.QueryRow(testCtx(t), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("syncpipe_limited_%d_%s", roleSeq.Add(1), strings.ToLower(db))
	if len(role) > 60 {
		role = role[:60]
	}
	ident := pgx.Identifier{role}.Sanitize()
	mustExec(t, conn, `CREATE ROLE `+ident+` LOGIN NOSUPERUSER NOREPLICATION`,
		`GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+ident)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = conn.Exec(ctx, `REVOKE ALL ON ALL TABLES IN SCHEMA public FROM `+ident)
		_, _ = conn.Exec(ctx, `DROP ROLE `+ident)
	})
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	c, err := pgx.Connect(testCtx(t), u.String())
	if err != nil {
		if pgtest.BinDir(t) == "" {
			t.Skipf("cannot log in as a new role on %s: %v", pgtest.EnvURL, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestPreflightRoleAndPrivileges(t *testing.T) {
	t.Parallel()
	conn, uri := preflightSetup(t)
	limited := limitedRole(t, conn, uri)
	var role string
	if err := limited.QueryRow(testCtx(t), `SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	err := Preflight(testCtx(t), limited, PreflightOptions{Tables: []string{"a"}, CreatePublication: true})
	lines := errorLines(err)
	if len(lines) != 2 {
		t.Fatalf("want 2 problems, got:\n%v", err)
	}
	wantRole := fmt.Sprintf("role %s lacks the REPLICATION attribute needed for logical replication: run ALTER ROLE %s WITH REPLICATION as a superuser", role, role)
	if lines[0] != wantRole {
		t.Errorf("role line:\n got  %s\n want %s", lines[0], wantRole)
	}
	if !strings.HasPrefix(lines[1], "publication syncpipe does not exist and this role may not create it (") ||
		!strings.Contains(lines[1], "): run CREATE PUBLICATION syncpipe FOR TABLE public.a as the owner of the tables, who needs CREATE on the database (GRANT CREATE ON DATABASE ") ||
		!strings.HasSuffix(lines[1], " TO "+role) {
		t.Errorf("publication line: %s", lines[1])
	}
	if !errors.Is(err, ErrReplicationRole) || !errors.Is(err, ErrPublication) {
		t.Errorf("sentinels not matched: %v", err)
	}
}

func TestSlotHealth(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	var db string
	if err := conn.QueryRow(testCtx(t), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	slot := "slot_" + db
	if len(slot) > 63 {
		slot = slot[:63]
	}
	st, err := SlotHealth(testCtx(t), conn, slot)
	if err != nil || st.Exists {
		t.Fatalf("missing slot: %+v, %v", st, err)
	}
	// The lag is measured to the server's WAL write position
	// (pg_current_wal_lsn), which an asynchronous commit need not have
	// reached yet: the commits are synchronous, so the INSERT's WAL is
	// written when SlotHealth looks.
	mustExec(t, conn, `SET synchronous_commit = on`,
		`SELECT pg_create_logical_replication_slot('`+slot+`', 'pgoutput')`,
		`CREATE TABLE t (id int PRIMARY KEY)`, `INSERT INTO t SELECT generate_series(1, 1000)`)
	st, err = SlotHealth(testCtx(t), conn, slot)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || st.WalStatus != "reserved" || st.ConfirmedFlushLSN == 0 || st.RestartLSN == 0 || st.LagBytes <= 0 || st.WalStatus == "lost" {
		t.Errorf("slot status = %+v", st)
	}
}

// TestSlotLost makes the server invalidate a slot (max_slot_wal_keep_size)
// and checks that SlotHealth reports it. It changes a server setting, so it
// runs only on the harness's own cluster and not in parallel.
func TestSlotLost(t *testing.T) {
	conn, _ := testDB(t)
	if pgtest.BinDir(t) == "" {
		t.Skip("changes server settings: only on the harness's own cluster")
	}
	ctx := testCtx(t)
	mustExec(t, conn, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`, `SELECT pg_reload_conf()`)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `ALTER SYSTEM RESET max_slot_wal_keep_size`)
		_, _ = conn.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	mustExec(t, conn, `SELECT pg_create_logical_replication_slot('syncpipe_lost_slot', 'pgoutput')`,
		`CREATE TABLE t (id serial PRIMARY KEY)`)
	// Each round writes WAL, switches segments and checkpoints; the
	// checkpointer invalidates the slot once it has seen the new setting.
	var st SlotStatus
	for round := 0; round < 30 && st.WalStatus != "lost"; round++ {
		mustExec(t, conn, `INSERT INTO t DEFAULT VALUES`, `SELECT pg_switch_wal()`, `CHECKPOINT`)
		var err error
		if st, err = SlotHealth(ctx, conn, "syncpipe_lost_slot"); err != nil {
			t.Fatal(err)
		}
	}
	if !st.Exists || st.WalStatus != "lost" {
		t.Fatalf("slot not invalidated: %+v", st)
	}
}
