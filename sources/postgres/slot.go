package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrSlotLost reports that the server invalidated the replication slot
// (pg_replication_slots.wal_status = 'lost'). The changes it retained are
// gone, so the stream cannot continue: after the snapshot, syncpipe starts a
// new replication group (fresh slot and snapshot) while the old one keeps
// serving.
var ErrSlotLost = errors.New("replication slot was invalidated by the server (wal_status = lost): it fell further behind than max_slot_wal_keep_size allows; syncpipe will re-snapshot into a new replication group (raise max_slot_wal_keep_size to avoid this)")

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
	// LagBytes is the server's current WAL position minus ConfirmedFlushLSN.
	LagBytes int64
}

// Lost reports whether the server invalidated the slot.
func (s SlotStatus) Lost() bool { return s.WalStatus == "lost" }

// Err returns an error matching ErrSlotLost, naming slot, when the slot was
// invalidated; otherwise nil.
func (s SlotStatus) Err(slot string) error {
	if !s.Lost() {
		return nil
	}
	return &problem{
		msg:  fmt.Sprintf("replication slot %s was invalidated by the server (wal_status = lost): it fell further behind than max_slot_wal_keep_size allows; syncpipe will re-snapshot into a new replication group (raise max_slot_wal_keep_size to avoid this)", quoteIdentIfNeeded(slot)),
		kind: ErrSlotLost,
	}
}

// SlotHealth reads the state of the replication slot named slot from
// pg_replication_slots. A missing slot is not an error (Exists is false); a
// lost slot is reported in WalStatus and the caller decides (see Err).
func SlotHealth(ctx context.Context, conn *pgx.Conn, slot string) (SlotStatus, error) {
	const q = `
SELECT coalesce(wal_status, ''),
       coalesce((confirmed_flush_lsn - '0/0'::pg_lsn)::int8, 0),
       coalesce((restart_lsn - '0/0'::pg_lsn)::int8, 0),
       coalesce(((CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)
                 - confirmed_flush_lsn)::int8, 0)
FROM pg_replication_slots WHERE slot_name = $1`
	var s SlotStatus
	var confirmed, restart int64
	err := conn.QueryRow(ctx, q, slot).Scan(&s.WalStatus, &confirmed, &restart, &s.LagBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotStatus{}, nil
	}
	if err != nil {
		return SlotStatus{}, fmt.Errorf("read health of replication slot %s: %w", slot, err)
	}
	s.Exists = true
	s.ConfirmedFlushLSN, s.RestartLSN = uint64(confirmed), uint64(restart)
	return s, nil
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
