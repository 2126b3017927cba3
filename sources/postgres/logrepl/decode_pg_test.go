package logrepl

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var quick = BatchLimits{MaxWait: 20 * time.Millisecond}

// TestDecodeDMLAgainstPostgres streams INSERT/UPDATE/DELETE/TRUNCATE from a
// real server and checks relation, tuples and old images for REPLICA
// IDENTITY DEFAULT and FULL.
func TestDecodeDMLAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t,
		"CREATE TABLE items (id int PRIMARY KEY, name text, n int, at timestamptz)",
		"CREATE TABLE full_t (a int, b text)",
		"ALTER TABLE full_t REPLICA IDENTITY FULL",
	)
	s := e.stream(ctx, Config{StartLSN: e.start})

	e.exec(ctx,
		"SET TimeZone = 'America/New_York'", // the stream must still print UTC
		"INSERT INTO items VALUES (1, 'one', NULL, '2024-01-02 03:04:05.25+02')",
		"UPDATE items SET name = 'uno' WHERE id = 1",
		"UPDATE items SET id = 2 WHERE id = 1",
		"DELETE FROM items WHERE id = 2",
		"INSERT INTO full_t VALUES (7, 'seven')",
		"UPDATE full_t SET b = 'siete'",
		"DELETE FROM full_t",
		"TRUNCATE items, full_t",
	)
	txns := collect(ctx, t, s, 8, quick)
	cs := dml(txns)
	if len(cs) != 8 {
		t.Fatalf("got %d changes, want 8", len(cs))
	}
	for i, tx := range txns {
		if tx.EndLSN <= tx.CommitLSN || tx.CommitLSN < tx.BeginLSN || tx.Xid == 0 || tx.CommitTime.IsZero() {
			t.Errorf("txn %d positions: begin %s commit %s end %s xid %d", i, tx.BeginLSN, tx.CommitLSN, tx.EndLSN, tx.Xid)
		}
		if i > 0 && tx.BeginLSN < txns[i-1].EndLSN {
			t.Errorf("txn %d begins at %s before txn %d ends at %s", i, tx.BeginLSN, i-1, txns[i-1].EndLSN)
		}
	}

	items := cs[0].Relation
	if items.Namespace != "public" || items.Name != "items" || items.ReplicaIdentity != IdentityDefault {
		t.Fatalf("relation = %+v", items)
	}
	if got := keyColumns(items); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("key columns = %v, want [0]", got)
	}
	if items.Columns[0].TypeOID != 23 || items.Columns[1].TypeOID != 25 || items.Columns[3].TypeOID != 1184 {
		t.Errorf("column types = %+v", items.Columns)
	}

	type want struct {
		kind    ChangeKind
		rel     string
		newRow  map[string]string
		oldKind byte
		oldRow  map[string]string
	}
	wants := []want{
		{Insert, "items", map[string]string{"id": "1", "name": "one", "n": "NULL", "at": "2024-01-02 01:04:05.25+00"}, OldNone, nil},
		{Update, "items", map[string]string{"id": "1", "name": "uno", "n": "NULL", "at": "2024-01-02 01:04:05.25+00"}, OldNone, nil},
		{Update, "items", map[string]string{"id": "2", "name": "uno", "n": "NULL", "at": "2024-01-02 01:04:05.25+00"},
			OldKey, map[string]string{"id": "1", "name": "NULL", "n": "NULL", "at": "NULL"}},
		{Delete, "items", nil, OldKey, map[string]string{"id": "2", "name": "NULL", "n": "NULL", "at": "NULL"}},
		{Insert, "full_t", map[string]string{"a": "7", "b": "seven"}, OldNone, nil},
		{Update, "full_t", map[string]string{"a": "7", "b": "siete"}, OldFull, map[string]string{"a": "7", "b": "seven"}},
		{Delete, "full_t", nil, OldFull, map[string]string{"a": "7", "b": "siete"}},
	}
	for i, w := range wants {
		c := cs[i]
		if c.Kind != w.kind || c.Relation.Name != w.rel || c.OldKind != w.oldKind || c.LSN == 0 {
			t.Errorf("change %d = %s %s old %q lsn %s; want %s %s old %q", i, c.Kind, c.Relation.Name, c.OldKind, c.LSN, w.kind, w.rel, w.oldKind)
			continue
		}
		if w.newRow != nil && !reflect.DeepEqual(row(c.Relation, c.New), w.newRow) {
			t.Errorf("change %d new = %v, want %v", i, row(c.Relation, c.New), w.newRow)
		}
		if w.newRow == nil && len(c.New.Columns) != 0 {
			t.Errorf("change %d has a new tuple", i)
		}
		if w.oldRow != nil && !reflect.DeepEqual(row(c.Relation, c.Old), w.oldRow) {
			t.Errorf("change %d old = %v, want %v", i, row(c.Relation, c.Old), w.oldRow)
		}
		if w.oldRow == nil && len(c.Old.Columns) != 0 {
			t.Errorf("change %d has an old tuple", i)
		}
	}
	if full := cs[4].Relation; full.ReplicaIdentity != IdentityFull || len(keyColumns(full)) != 2 {
		t.Errorf("full_t relation = %+v", full)
	}
	tr := cs[7]
	if tr.Kind != Truncate || len(tr.TruncateRelations) != 2 || tr.TruncateCascade || tr.TruncateRestartIdentity {
		t.Fatalf("truncate = %+v", tr)
	}
	names := []string{tr.TruncateRelations[0].Name, tr.TruncateRelations[1].Name}
	if strings.Join(names, ",") != "items,full_t" && strings.Join(names, ",") != "full_t,items" {
		t.Errorf("truncated %v", names)
	}
}

// TestUnchangedToastAgainstPostgres checks that an UPDATE which does not
// touch a large out-of-line value sends it as 'u', and that the value data
// outlives later receives (it is not a view of the receive buffer).
func TestUnchangedToastAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	e := newEnv(ctx, t,
		"CREATE TABLE docs (id int PRIMARY KEY, body text, n int)",
		"ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL", // no compression: 10 kB stays out of line
	)
	s := e.stream(ctx, Config{StartLSN: e.start})
	e.exec(ctx,
		"INSERT INTO docs VALUES (1, repeat('x', 10000), 1)",
		"UPDATE docs SET n = 2 WHERE id = 1",
		"UPDATE docs SET body = 'short', n = 3 WHERE id = 1",
	)
	cs := dml(collect(ctx, t, s, 3, quick))
	ins, upd, upd2 := cs[0], cs[1], cs[2]
	if got := ins.New.Columns[1]; got.Kind != ColText || string(got.Data) != strings.Repeat("x", 10000) {
		t.Fatalf("insert body kind %q len %d", got.Kind, len(got.Data))
	}
	if got := row(upd.Relation, upd.New); !reflect.DeepEqual(got, map[string]string{"id": "1", "body": "TOAST", "n": "2"}) {
		t.Fatalf("update new = %v, want body unchanged-TOAST", got)
	}
	if got := row(upd2.Relation, upd2.New); !reflect.DeepEqual(got, map[string]string{"id": "1", "body": "short", "n": "3"}) {
		t.Fatalf("second update new = %v", got)
	}
}

// keyColumns returns the indexes of r's replica identity columns, in column
// order.
func keyColumns(r *Relation) []int {
	var idx []int
	for i, c := range r.Columns {
		if c.Key {
			idx = append(idx, i)
		}
	}
	return idx
}
