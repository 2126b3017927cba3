package logrepl

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultHeartbeatInterval is the heartbeat period RunHeartbeat uses when
// given zero (PowerSync's default too).
const DefaultHeartbeatInterval = 60 * time.Second

// Heartbeat writes one non-transactional logical message with prefix
// HeartbeatPrefix ("syncpipe") to the source's WAL and returns its LSN.
// Logical messages are per database: conn must be a normal (not
// replication) connection to the database the slot decodes. The stream
// receives the message even when no published table changes, turns it into
// an idle position (an empty Batch whose EndLSN is at or past the returned
// LSN), and so the slot's confirmed_flush_lsn keeps moving and the server
// can recycle WAL. Safe to call from any goroutine that may use conn.
func Heartbeat(ctx context.Context, conn *pgx.Conn) (LSN, error) {
	var text string
	err := conn.QueryRow(ctx,
		"SELECT pg_catalog.pg_logical_emit_message(false, $1, 'ping')::text", HeartbeatPrefix).Scan(&text)
	if err != nil {
		return 0, fmt.Errorf("heartbeat (pg_logical_emit_message): %w", err)
	}
	lsn, err := parseLSN([]byte(text))
	if err != nil {
		return 0, fmt.Errorf("heartbeat: parse LSN %q: %w", text, err)
	}
	return lsn, nil
}

// RunHeartbeat calls Heartbeat at once and then every interval (zero means
// DefaultHeartbeatInterval) until ctx ends, when it returns nil. It returns
// the first failed heartbeat's error; the caller decides whether to retry on
// a new connection. It owns conn while it runs.
func RunHeartbeat(ctx context.Context, conn *pgx.Conn, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := Heartbeat(ctx, conn); err != nil {
			if ctx.Err() != nil {
				return nil // stopped, not failed
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
