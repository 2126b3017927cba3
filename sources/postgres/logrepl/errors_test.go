package logrepl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestClassify covers server errors the harness cannot produce (wal_level,
// invalidated slots) and the mapping of the others.
func TestClassify(t *testing.T) {
	cases := []struct {
		code, msg, detail string
		kind              error
		line              string
	}{
		{"55000", "logical decoding requires wal_level >= logical", "", ErrWALLevel, "set wal_level = logical"},
		{"55000", `cannot read from logical replication slot "s1"`, "This slot has been invalidated because it exceeded the maximum reserved size.", ErrSlotLost, "syncpipe will start a new replication group"},
		{"55000", `can no longer get changes from replication slot "s1"`, "", ErrSlotLost, "wal_status=lost"},
		{"42704", `replication slot "s1" does not exist`, "", ErrSlotMissing, "replication slot s1 does not exist: it was dropped; syncpipe will start a new replication group"},
		{"42704", `publication "pub" does not exist`, "", ErrPublicationMissing, "run CREATE PUBLICATION pub FOR TABLE <the sync-rules tables>"},
		{"55006", `replication slot "s1" is active for PID 4242`, "", ErrSlotInUse, "in use by process 4242"},
		{"28P01", `password authentication failed for user "bob"`, "", ErrAuth, "check the user and password"},
		{"42501", "permission denied to start WAL sender", "", ErrReplicationPrivilege, "WITH REPLICATION"},
	}
	for _, c := range cases {
		cause := &pgconn.PgError{Code: c.code, Message: c.msg, Detail: c.detail}
		err := classify(fmt.Errorf("start: %w", cause), "s1", "pub", nil)
		if !errors.Is(err, c.kind) {
			t.Errorf("%s %q: got %v, want %v", c.code, c.msg, err, c.kind)
			continue
		}
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg != cause {
			t.Errorf("%s: cause not reachable", c.code)
		}
		if msg := err.Error(); !strings.Contains(msg, c.line) || strings.Contains(msg, "\n") {
			t.Errorf("%s: message %q lacks %q", c.code, msg, c.line)
		}
		if again := classify(err, "s1", "pub", nil); again != err {
			t.Errorf("%s: classified twice", c.code)
		}
	}
	other := &pgconn.PgError{Code: "XX000", Message: "internal"}
	if err := classify(other, "s1", "pub", nil); err != error(other) {
		t.Errorf("unknown error changed: %v", err)
	}
	if err := classify(nil, "s", "p", nil); err != nil {
		t.Errorf("classify(nil) = %v", err)
	}
}

func TestSlotUsable(t *testing.T) {
	ok := Slot{Name: "s", Type: "logical", Plugin: "pgoutput", Database: "db", CurrentDatabase: "db", WALStatus: "reserved"}
	if err := ok.usable(); err != nil {
		t.Fatal(err)
	}
	lost := ok
	lost.WALStatus = "lost"
	mustKind(t, lost.usable(), ErrSlotLost)
	other := ok
	other.Plugin = "wal2json"
	mustKind(t, other.usable(), ErrSlotMismatch)
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Slot: "ok_1"}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	err := Config{Slot: "Bad", StatusInterval: time.Minute, ReceiveTimeout: time.Second, BufferBytes: -1}.Validate()
	for _, want := range []string{"slot:", "receive_timeout (1s) must be longer", "must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to mention %q", err, want)
		}
	}
}

func TestQuoting(t *testing.T) {
	if got := quoteIdent(`a"b`); got != `"a""b"` {
		t.Errorf("quoteIdent = %s", got)
	}
	if got := quoteLiteral(`it's`); got != `'it''s'` {
		t.Errorf("quoteLiteral = %s", got)
	}
	if got := quoteLiteral(`a\b`); got != `E'a\\b'` {
		t.Errorf("quoteLiteral = %s", got)
	}
	if got := quoteLiteral(quoteIdent("MyPub")); got != `'"MyPub"'` {
		t.Errorf("publication_names value = %s", got)
	}
}
