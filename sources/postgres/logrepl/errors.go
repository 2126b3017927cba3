package logrepl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Every user-facing error of this package is an *Error
// whose Kind is one of these, so callers branch with errors.Is and log
// Error() as one actionable line.
var (
	// ErrSlotMissing: the replication slot does not exist (it was dropped).
	// The stream cannot resume; start a new replication group.
	ErrSlotMissing = errors.New("replication slot missing")
	// ErrSlotLost: the slot was invalidated (wal_status = lost) because the
	// server removed WAL it still needed. Like ErrSlotMissing, only a new
	// replication group recovers.
	ErrSlotLost = errors.New("replication slot lost")
	// ErrSlotInUse: another process is streaming from the slot.
	ErrSlotInUse = errors.New("replication slot in use")
	// ErrSlotMismatch: a slot of that name exists but cannot serve this
	// stream (other output plugin, other database, physical slot).
	ErrSlotMismatch = errors.New("replication slot unusable")
	// ErrSlotAhead: the slot already confirmed a position past
	// Config.StartLSN, so the changes in between can no longer be read
	// (the stored progress is older than what was acknowledged, e.g. storage
	// restored from a backup, or the slot was advanced by hand).
	ErrSlotAhead = errors.New("replication slot ahead of resume position")
	// ErrPublicationMissing: the publication named in Config does not exist.
	ErrPublicationMissing = errors.New("publication missing")
	// ErrWALLevel: the source's wal_level is not logical.
	ErrWALLevel = errors.New("wal_level is not logical")
	// ErrAuth: the source rejected the credentials.
	ErrAuth = errors.New("authentication failed")
	// ErrReplicationPrivilege: the role may not open a replication connection.
	ErrReplicationPrivilege = errors.New("replication not permitted")
	// ErrReceiveTimeout: nothing arrived from the source within
	// Config.ReceiveTimeout; the caller should reconnect.
	ErrReceiveTimeout = errors.New("receive timeout")
	// ErrProtocol: the server sent something that is not valid pgoutput
	// protocol version 1 (or breaks its message order).
	ErrProtocol = errors.New("pgoutput protocol error")
	// ErrClosed is returned by Next after Close.
	ErrClosed = errors.New("stream closed")
)

// Error is a classified error: Msg is one line saying what happened and what
// to do, Kind is the sentinel to test with errors.Is, and Err the underlying
// cause (often a *pgconn.PgError), reachable with errors.As.
type Error struct {
	Kind error
	Msg  string
	Err  error
}

// Error returns the one-line message.
func (e *Error) Error() string { return e.Msg }

// Unwrap exposes both the sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func newError(kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Err: cause}
}

func errSlotMissing(slot string, cause error) error {
	return newError(ErrSlotMissing, cause,
		"replication slot %s does not exist: it was dropped; syncpipe will start a new replication group", slot)
}

func errSlotLost(slot string, cause error) error {
	return newError(ErrSlotLost, cause,
		"replication slot %s was invalidated (wal_status=lost: the server removed WAL it needed, see max_slot_wal_keep_size): syncpipe will start a new replication group", slot)
}

func errSlotInUse(slot string, pid string, cause error) error {
	by := "another process"
	if pid != "" {
		by = "process " + pid
	}
	return newError(ErrSlotInUse, cause,
		"replication slot %s is in use by %s: stop the other syncpipe worker (or wait for its lease to expire), or terminate it with SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '%s'",
		slot, by, slot)
}

// errPublicationMissing is ErrPublicationMissing with the one remedy
// (CreatePublicationRemedy) for the tables the stream knows, if any.
func errPublicationMissing(pub string, tables []string, cause error) error {
	return newError(ErrPublicationMissing, cause,
		"publication %s does not exist in the source database: run %s",
		QuoteIdentIfNeeded(pub), CreatePublicationRemedy(pub, tables))
}

func errWALLevel(level string, cause error) error {
	if level == "" {
		level = "not logical"
	}
	return newError(ErrWALLevel, cause,
		"source wal_level is %s: set wal_level = logical in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", level)
}

// classify turns a server error met while creating, starting or streaming
// from slot (with publication pub of tables, when known) into an *Error;
// other errors pass through unchanged.
func classify(err error, slot, pub string, tables []*Relation) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	msg := pgErr.Message
	switch pgErr.Code {
	case "42704": // undefined_object
		if strings.Contains(msg, "publication") {
			return errPublicationMissing(pub, relationNames(tables), err)
		}
		if strings.Contains(msg, "replication slot") {
			return errSlotMissing(slot, err)
		}
	case "55006": // object_in_use
		if strings.Contains(msg, "replication slot") {
			pid := ""
			if i := strings.LastIndex(msg, "PID "); i >= 0 {
				pid = strings.TrimSpace(msg[i+4:])
			}
			return errSlotInUse(slot, pid, err)
		}
	case "55000": // object_not_in_prerequisite_state
		if strings.Contains(msg, "wal_level") {
			return errWALLevel("", err)
		}
		if strings.Contains(msg, "can no longer get changes") || strings.Contains(pgErr.Detail, "invalidated") ||
			strings.Contains(msg, "invalidated") {
			return errSlotLost(slot, err)
		}
	case "28P01", "28000": // invalid_password, invalid_authorization_specification
		return classifyConnect(err, "")
	case "42501": // insufficient_privilege
		if strings.Contains(msg, "walsender") || strings.Contains(msg, "WAL sender") || strings.Contains(msg, "replication") {
			return classifyConnect(err, "")
		}
	}
	return err
}

// classifyConnect turns a connection failure of user into an *Error with an
// actionable line (credentials, replication privilege); other errors are
// wrapped with the operation name.
func classifyConnect(err error, user string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("connect to the source for replication: %w", err)
	}
	who := "the configured user"
	if user != "" {
		who = "user " + user
	}
	switch pgErr.Code {
	case "28P01", "28000":
		return newError(ErrAuth, err,
			"the source rejected %s (%s): check the user and password in the source connection string and the server's pg_hba.conf",
			who, pgErr.Message)
	case "42501":
		role := "<user>"
		if user != "" {
			role = quoteIdent(user)
		}
		return newError(ErrReplicationPrivilege, err,
			"%s may not open a replication connection (%s): grant it with ALTER ROLE %s WITH REPLICATION",
			who, pgErr.Message, role)
	}
	return fmt.Errorf("connect to the source for replication: %w", err)
}

// quoteIdent quotes s as an SQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// quoteLiteral quotes s as an SQL string literal that is correct whatever
// standard_conforming_strings is set to.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}
