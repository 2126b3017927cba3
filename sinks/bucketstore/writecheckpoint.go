package bucketstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// writeCheckpointUser is the write_checkpoints key of a client of a user.
func writeCheckpointUser(userID, clientID string) string { return userID + "/" + clientID }

// CreateWriteCheckpoint records a write checkpoint for a client of a user
// (SPEC §6, GET /write-checkpoint2.json) and returns its number: one more
// than the client's previous one. sourceLSN is the source database's
// current WAL position, read by the caller after the client's writes were
// acknowledged; the write checkpoint is due once a checkpoint's LSN reaches
// it. If two requests of one client race, the stored LSN is the larger of
// the two, so no write checkpoint is ever reported before the writes it
// covers are replicated. Safe for concurrent use (one atomic upsert).
func (s *Reader) CreateWriteCheckpoint(ctx context.Context, userID, clientID string, sourceLSN pglogrepl.LSN) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO write_checkpoints AS w (user_id, lsn, write_checkpoint) VALUES ($1, $2::pg_lsn, 1)
		ON CONFLICT (user_id) DO UPDATE SET lsn = GREATEST(w.lsn, EXCLUDED.lsn),
		  write_checkpoint = w.write_checkpoint + 1, requested_at = now()
		RETURNING write_checkpoint`, writeCheckpointUser(userID, clientID), sourceLSN.String()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("create write checkpoint for %s/%s: %w", userID, clientID, err)
	}
	return n, nil
}

// RequestWriteCheckpoint records a write checkpoint the client numbered
// itself (POST /sync/checkpoint-request, the SDKs' checkpoint_mode
// "requests") and returns the client's write checkpoint: the larger of
// the stored one and requested. It is due, like CreateWriteCheckpoint's,
// once a checkpoint's LSN reaches sourceLSN (never lowered by a request
// that read an older position). Safe for concurrent use.
func (s *Reader) RequestWriteCheckpoint(ctx context.Context, userID, clientID string, requested int64, sourceLSN pglogrepl.LSN) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO write_checkpoints AS w (user_id, lsn, write_checkpoint) VALUES ($1, $2::pg_lsn, $3)
		ON CONFLICT (user_id) DO UPDATE SET lsn = GREATEST(w.lsn, EXCLUDED.lsn),
		  write_checkpoint = GREATEST(w.write_checkpoint, EXCLUDED.write_checkpoint), requested_at = now()
		RETURNING write_checkpoint`, writeCheckpointUser(userID, clientID), sourceLSN.String(), requested).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("request write checkpoint %d for %s/%s: %w", requested, userID, clientID, err)
	}
	return n, nil
}

// WriteCheckpointFor returns the client's newest write checkpoint if the
// checkpoint at checkpointLSN covers it (its LSN ≤ checkpointLSN); ok is
// false when the client has none or its newest is not replicated yet. The
// sync API calls it for every checkpoint line it sends and includes
// write_checkpoint only when ok. Safe for concurrent use.
func (s *Reader) WriteCheckpointFor(ctx context.Context, userID, clientID string, checkpointLSN pglogrepl.LSN) (int64, bool, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT write_checkpoint FROM write_checkpoints WHERE user_id = $1 AND lsn <= $2::pg_lsn`,
		writeCheckpointUser(userID, clientID), checkpointLSN.String()).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read write checkpoint for %s/%s: %w", userID, clientID, err)
	}
	return n, true, nil
}

// WriteCheckpointClient names a client of a user, for WriteCheckpointsFor.
type WriteCheckpointClient struct{ UserID, ClientID string }

// WriteCheckpointsFor is WriteCheckpointFor for many clients in one query:
// it returns the newest write checkpoint of each client that has one
// covered by the checkpoint at checkpointLSN (clients without one are
// absent). The sync API reads the write checkpoints of all its streams
// this way, once per checkpoint instead of once per stream. Safe for
// concurrent use.
func (s *Reader) WriteCheckpointsFor(ctx context.Context, clients []WriteCheckpointClient, checkpointLSN pglogrepl.LSN) (map[WriteCheckpointClient]int64, error) {
	out := make(map[WriteCheckpointClient]int64)
	if len(clients) == 0 {
		return out, nil
	}
	keys := make([]string, len(clients))
	byKey := make(map[string]WriteCheckpointClient, len(clients))
	for i, c := range clients {
		keys[i] = writeCheckpointUser(c.UserID, c.ClientID)
		byKey[keys[i]] = c
	}
	rows, err := s.pool.Query(ctx, `SELECT user_id, write_checkpoint FROM write_checkpoints WHERE user_id = ANY($1) AND lsn <= $2::pg_lsn`,
		keys, checkpointLSN.String())
	if err != nil {
		return nil, fmt.Errorf("read write checkpoints of %d clients: %w", len(clients), err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var n int64
		if err := rows.Scan(&key, &n); err != nil {
			return nil, fmt.Errorf("read write checkpoints: %w", err)
		}
		out[byKey[key]] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read write checkpoints of %d clients: %w", len(clients), err)
	}
	return out, nil
}
