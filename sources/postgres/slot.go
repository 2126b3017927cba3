package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SlotStatus is the health of one replication slot.
type SlotStatus struct {
	// Exists is false when there is no slot of that name.
	Exists bool
	// WalStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	WalStatus string
	// ConfirmedFlushLSN is the position the consumer confirmed (0 if none).
	ConfirmedFlushLSN uint64
	// RestartLSN is the oldest WAL the slot still needs (0 if none).
	RestartLSN uint64
	// LagBytes is the server's current WAL position (the replay position
	// on a standby) minus ConfirmedFlushLSN, at least 0.
	LagBytes int64
	// RetainedBytes is the current WAL position minus RestartLSN: the WAL
	// the server keeps on disk for the slot.
	RetainedBytes int64
	// Active is true while a connection streams from the slot.
	Active bool
}

// SlotHealth reads the state of the replication slot named slot from
// pg_replication_slots. A missing slot is not an error (Exists is false); a
// lost slot is reported in WalStatus and the caller decides (see Err).
func SlotHealth(ctx context.Context, conn *pgx.Conn, slot string) (SlotStatus, error) {
	st, err := SlotsHealth(ctx, conn, []string{slot})
	if err != nil {
		return SlotStatus{}, err
	}
	return st[slot], nil
}

// slotsSQL reads the named slots, measured against the server's current
// WAL position (its replay position on a standby).
const slotsSQL = `
WITH cur AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn)
SELECT slot_name::text, active, coalesce(wal_status, ''),
       coalesce((confirmed_flush_lsn - '0/0'::pg_lsn)::int8, 0),
       coalesce((restart_lsn - '0/0'::pg_lsn)::int8, 0),
       coalesce(greatest(0, (cur.lsn - confirmed_flush_lsn)::int8), 0),
       coalesce(greatest(0, (cur.lsn - restart_lsn)::int8), 0)
FROM pg_replication_slots, cur WHERE slot_name = ANY($1)`

// SlotsHealth is SlotHealth for several slots in one read, by name; a
// missing slot has no entry.
func SlotsHealth(ctx context.Context, conn *pgx.Conn, slots []string) (map[string]SlotStatus, error) {
	rows, err := conn.Query(ctx, slotsSQL, slots)
	if err != nil {
		return nil, fmt.Errorf("read health of replication slots %v: %w", slots, err)
	}
	defer rows.Close()
	out := make(map[string]SlotStatus, len(slots))
	for rows.Next() {
		var name string
		var confirmed, restart int64
		s := SlotStatus{Exists: true}
		if err := rows.Scan(&name, &s.Active, &s.WalStatus, &confirmed, &restart, &s.LagBytes, &s.RetainedBytes); err != nil {
			return nil, fmt.Errorf("read health of replication slots %v: %w", slots, err)
		}
		s.ConfirmedFlushLSN, s.RestartLSN = uint64(confirmed), uint64(restart)
		out[name] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read health of replication slots %v: %w", slots, err)
	}
	return out, nil
}

// WALBehind returns how many bytes of WAL the server has written past lsn
// (0 if none): how far a consumer at lsn is behind.
func WALBehind(ctx context.Context, conn *pgx.Conn, lsn uint64) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT greatest(0, ((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)
		- $1::text::pg_lsn)::int8)`, fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the source WAL position: %w", err)
	}
	return n, nil
}
