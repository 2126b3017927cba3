package logrepl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// OutputPlugin is the logical decoding plugin every slot of this package uses.
const OutputPlugin = "pgoutput"

// streamReadBuffer is how much a replication connection reads from its
// socket at once. pgx reads 8 kB at a time, a few dozen changes of a
// catching-up stream, and on a busy machine every read system call of the
// stream costs about as much as decoding a change; a stream that is
// behind has far more than that waiting in the socket.
const streamReadBuffer = 256 << 10

// Connect opens a replication connection (replication=database) for
// CreateSlot, DropSlot, LookupSlot and Start. The session runs with
// TimeZone=UTC (a startup parameter, overriding any TimeZone in connString),
// so pgoutput prints timestamptz values in UTC. Authentication and privilege
// failures come back as *Error (ErrAuth, ErrReplicationPrivilege). The
// caller owns and closes the connection.
func Connect(ctx context.Context, connString string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse source connection string: %w", err)
	}
	for k := range cfg.RuntimeParams {
		if strings.EqualFold(k, "timezone") || strings.EqualFold(k, "replication") {
			delete(cfg.RuntimeParams, k)
		}
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	var batching *batchingReader // the last connection attempt's
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		batching = &batchingReader{r: r}
		return pgproto3.NewFrontend(bufio.NewReaderSize(batching, streamReadBuffer), w)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classifyConnect(err, cfg.User)
	}
	conn.CustomData()[batchingReaderKey] = batching
	return conn, nil
}

// Slot describes a replication slot as pg_replication_slots reports it.
type Slot struct {
	Name              string
	Type              string // "logical" or "physical"
	Plugin            string
	Database          string // database the slot decodes; empty for physical slots
	ActivePID         int    // walsender streaming from it, 0 when inactive
	RestartLSN        LSN
	ConfirmedFlushLSN LSN    // last position a consumer acknowledged
	WALStatus         string // reserved, extended, unreserved or lost
	// CurrentDatabase is the database of the connection used for the lookup.
	CurrentDatabase string
}

// Ready reports whether the slot has its consistent point. A logical slot
// is listed from the moment a session starts creating it, with no
// confirmed_flush_lsn, until it has found the point (after the
// transactions running then have ended). Changes committed before that
// point are never streamed from it, so a snapshot read for the slot must
// not start before it is ready: rows such a read misses would be lost.
func (s Slot) Ready() bool { return s.Type != "logical" || s.ConfirmedFlushLSN != 0 }

// slotPoll is how often AwaitSlot looks again at a slot being created.
const slotPoll = 100 * time.Millisecond

// AwaitSlot looks up the slot name and, while another session is still
// creating it, waits until it is ready (Slot.Ready). A slot whose creator
// failed is gone: ErrSlotMissing, and the caller may create it. ctx bounds
// the wait.
func AwaitSlot(ctx context.Context, conn *pgconn.PgConn, name string) (Slot, error) {
	for {
		s, err := LookupSlot(ctx, conn, name)
		if err != nil || s.Ready() {
			return s, err
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("wait for replication slot %s, which pid %d is still creating (it waits for the transactions running on the source to end): %w",
				name, s.ActivePID, ctx.Err())
		case <-time.After(slotPoll):
		}
	}
}

// usable checks that s can serve a pgoutput stream from this database.
func (s Slot) usable() error {
	switch {
	case s.WALStatus == "lost":
		return errSlotLost(s.Name, nil)
	case s.Type != "logical" || s.Plugin != OutputPlugin:
		return newError(ErrSlotMismatch, nil,
			"replication slot %s is a %s slot for plugin %q, not a pgoutput logical slot: drop it or configure another slot name",
			s.Name, s.Type, s.Plugin)
	case s.Database != s.CurrentDatabase:
		return newError(ErrSlotMismatch, nil,
			"replication slot %s belongs to database %s, not %s: configure another slot name",
			s.Name, s.Database, s.CurrentDatabase)
	}
	return nil
}

// ValidateSlotName checks name against PostgreSQL's rules for slot names
// (1-63 characters of lower-case letters, digits and underscores). Names are
// checked before they are put into replication commands.
func ValidateSlotName(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("replication slot name %q must have 1 to 63 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("replication slot name %q may only contain lower-case letters, digits and underscores", name)
		}
	}
	return nil
}

// CreateSlot creates the permanent pgoutput slot name on a replication
// connection (see Connect) without exporting a snapshot, and returns its
// consistent point: changes committed after it will be streamed. If the slot
// already exists (the resume path) that is not an error: its
// confirmed_flush_lsn is returned instead, after checking it is a usable
// pgoutput slot of this database that is not lost; one that another
// session is still creating is waited for (AwaitSlot). Call it before the
// snapshot so no change between snapshot and stream is missed.
func CreateSlot(ctx context.Context, conn *pgconn.PgConn, name string) (LSN, error) {
	if err := ValidateSlotName(name); err != nil {
		return 0, err
	}
	if err := checkWALLevel(ctx, conn); err != nil {
		return 0, err
	}
	rows, err := simpleQuery(ctx, conn, "CREATE_REPLICATION_SLOT "+name+" LOGICAL "+OutputPlugin+" NOEXPORT_SNAPSHOT")
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate_object
		// Another session created it, or is still creating it: the
		// position it starts from is only known once it is ready.
		s, err := AwaitSlot(ctx, conn, name)
		if err != nil {
			return 0, err
		}
		if err := s.usable(); err != nil {
			return 0, err
		}
		return s.ConfirmedFlushLSN, nil
	}
	if err != nil {
		if c := classify(err, name, "", nil); c != err {
			return 0, c
		}
		return 0, fmt.Errorf("create replication slot %s: %w", name, err)
	}
	if len(rows) != 1 || len(rows[0]) < 2 {
		return 0, fmt.Errorf("create replication slot %s: unexpected reply (%d rows)", name, len(rows))
	}
	lsn, err := parseLSN(rows[0][1])
	if err != nil {
		return 0, fmt.Errorf("create replication slot %s: consistent point: %w", name, err)
	}
	return lsn, nil
}

// DropSlot drops the slot name. A slot that does not exist is not an error
// (dropping is idempotent); a slot another process streams from is
// ErrSlotInUse. conn may be a replication or a normal connection.
func DropSlot(ctx context.Context, conn *pgconn.PgConn, name string) error {
	if err := ValidateSlotName(name); err != nil {
		return err
	}
	_, err := simpleQuery(ctx, conn, "SELECT pg_drop_replication_slot("+quoteLiteral(name)+")")
	if err == nil {
		return nil
	}
	c := classify(err, name, "", nil)
	if errors.Is(c, ErrSlotMissing) {
		return nil
	}
	if c != err {
		return c
	}
	return fmt.Errorf("drop replication slot %s: %w", name, err)
}

// LookupSlot reads slot name from pg_replication_slots. A missing slot is
// ErrSlotMissing. conn may be a replication or a normal connection; the
// query uses the simple protocol, which both accept.
func LookupSlot(ctx context.Context, conn *pgconn.PgConn, name string) (Slot, error) {
	if err := ValidateSlotName(name); err != nil {
		return Slot{}, err
	}
	rows, err := simpleQuery(ctx, conn, `SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''),
		coalesce(active_pid, 0), coalesce(restart_lsn, '0/0'), coalesce(confirmed_flush_lsn, '0/0'),
		coalesce(wal_status, ''), current_database()
		FROM pg_catalog.pg_replication_slots WHERE slot_name = `+quoteLiteral(name))
	if err != nil {
		return Slot{}, fmt.Errorf("look up replication slot %s: %w", name, err)
	}
	if len(rows) == 0 {
		return Slot{}, errSlotMissing(name, nil)
	}
	r := rows[0]
	if len(r) != 8 {
		return Slot{}, fmt.Errorf("look up replication slot %s: want 8 columns, got %d", name, len(r))
	}
	s := Slot{Name: name, Type: string(r[0]), Plugin: string(r[1]), Database: string(r[2]),
		WALStatus: string(r[6]), CurrentDatabase: string(r[7])}
	if s.ActivePID, err = strconv.Atoi(string(r[3])); err != nil {
		return Slot{}, fmt.Errorf("look up replication slot %s: active_pid: %w", name, err)
	}
	if s.RestartLSN, err = parseLSN(r[4]); err != nil {
		return Slot{}, fmt.Errorf("look up replication slot %s: restart_lsn: %w", name, err)
	}
	if s.ConfirmedFlushLSN, err = parseLSN(r[5]); err != nil {
		return Slot{}, fmt.Errorf("look up replication slot %s: confirmed_flush_lsn: %w", name, err)
	}
	return s, nil
}

// checkWALLevel reports ErrWALLevel unless the server runs wal_level=logical.
func checkWALLevel(ctx context.Context, conn *pgconn.PgConn) error {
	rows, err := simpleQuery(ctx, conn, "SHOW wal_level")
	if err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return fmt.Errorf("read wal_level: unexpected reply")
	}
	if level := string(rows[0][0]); level != "logical" {
		return errWALLevel(level, nil)
	}
	return nil
}

// checkPublication reports ErrPublicationMissing unless pub exists in the
// connection's database.
func checkPublication(ctx context.Context, conn *pgconn.PgConn, pub string, tables []*Relation) error {
	rows, err := simpleQuery(ctx, conn, "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = "+quoteLiteral(pub))
	if err != nil {
		return fmt.Errorf("look up publication %s: %w", pub, err)
	}
	if len(rows) == 0 {
		return errPublicationMissing(pub, relationNames(tables), nil)
	}
	return nil
}

// showSetting returns a server setting through SHOW (a command replication
// connections accept).
func showSetting(ctx context.Context, conn *pgconn.PgConn, name string) (string, error) {
	rows, err := simpleQuery(ctx, conn, "SHOW "+name)
	if err != nil {
		return "", fmt.Errorf("show %s: %w", name, err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return "", fmt.Errorf("show %s: unexpected reply", name)
	}
	return string(rows[0][0]), nil
}

// simpleQuery runs sql with the simple protocol and returns the rows of its
// last result. The values are copies, safe to keep.
func simpleQuery(ctx context.Context, conn *pgconn.PgConn, sql string) ([][][]byte, error) {
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(results) == 0 {
		return nil, nil
	}
	last := results[len(results)-1]
	if last.Err != nil {
		return nil, last.Err
	}
	return last.Rows, nil
}

func parseLSN(b []byte) (LSN, error) {
	var l LSN
	err := l.Scan(string(b))
	return l, err
}
