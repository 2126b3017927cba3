package benchmarks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A logical slot's walsender starts decoding at the slot's restart_lsn, not
// at its confirmed position, and skips what was confirmed. restart_lsn
// moves only once the walsender has decoded a running-transactions record
// (logged at checkpoints and, while WAL is written, by the background
// writer every 15 s) and the client has then confirmed a position past it,
// so a syncpipe child stopped right after catching up leaves it behind —
// after P3-large, by the whole large transaction — and the next child would
// decode that WAL again before its own. settle moves it on between the
// measured catch-ups, untimed: a syncpipe that keeps running does not
// re-decode, nor does the decode-only baseline on its fresh slot.

// settleTimeout bounds settle; the slot's lag is reported either way.
const settleTimeout = 90 * time.Second

// settle moves the group's slot on past the source's current position. A
// syncpipe child of its own streams (the measured one has stopped, so its
// stage summary, CPU and RSS stay the catch-up's), reporting its position
// every second, while the harness writes a syncpipe heartbeat message a
// second — WAL for the background writer's next running-transactions
// record, and positions for syncpipe to confirm — until the slot's
// restart_lsn has passed the position. No CHECKPOINT: the full-page images
// after one would inflate the next updates' WAL. It returns how long that
// took and gives up, with a log line, after settleTimeout.
func (sr *streamRun) settle(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	slot, err := sr.groupSlot(ctx)
	if err != nil {
		return 0, err
	}
	var target string
	if err := sr.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		return 0, fmt.Errorf("settle: %w", err)
	}
	cfg := strings.Replace(sr.cfg, "\nreplication:\n", "\nreplication:\n  stream: {status_interval: 1s}\n", 1)
	child, err := StartChild(ctx, sr.opt.Harness.childOptions(cfg, "replication"))
	if err != nil {
		return 0, err
	}
	err = sr.settleWith(ctx, child, slot, target)
	if _, stopErr := child.Stop(); err == nil {
		err = stopErr
	}
	return time.Since(start), err
}

func (sr *streamRun) settleWith(ctx context.Context, child *Child, slot, target string) error {
	if _, err := child.WaitFor(ctx, "streaming from the replication slot"); err != nil {
		return err
	}
	start := time.Now()
	var last time.Time
	for time.Since(start) < settleTimeout {
		if time.Since(last) >= time.Second {
			if _, err := sr.src.Exec(ctx, "SELECT pg_logical_emit_message(false, 'syncpipe', 'bench settle')"); err != nil {
				return fmt.Errorf("settle: %w", err)
			}
			last = time.Now()
		}
		var passed bool
		if err := sr.src.QueryRow(ctx, `SELECT coalesce(bool_and(restart_lsn >= $2::pg_lsn), false)
			FROM pg_replication_slots WHERE slot_name = $1`, slot, target).Scan(&passed); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if passed {
			return nil
		}
		if childExited(child) {
			return fmt.Errorf("syncpipe exited while its slot advanced:\n%s", child.Tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	logf(sr.opt.Log, "slot %s: restart_lsn still before %s after %s", slot, target, settleTimeout)
	return nil
}

// groupSlot is the replication slot of the active group.
func (sr *streamRun) groupSlot(ctx context.Context) (string, error) {
	var slot string
	if err := sr.storage.QueryRow(ctx, `SELECT slot_name FROM syncpipe.groups WHERE state = 'ACTIVE' ORDER BY id DESC LIMIT 1`).Scan(&slot); err != nil {
		return "", fmt.Errorf("read the group's slot: %w", err)
	}
	return slot, nil
}

// groupSlotBehind is slotBehind for the active group's slot.
func (sr *streamRun) groupSlotBehind(ctx context.Context) (int64, error) {
	slot, err := sr.groupSlot(ctx)
	if err != nil {
		return 0, err
	}
	return slotBehind(ctx, sr.src, slot)
}

// slotBehind is the WAL from slot's restart_lsn to the current insert
// position: what its walsender decodes from START_REPLICATION on.
func slotBehind(ctx context.Context, src *pgx.Conn, slot string) (int64, error) {
	var n int64
	err := src.QueryRow(ctx, `SELECT coalesce(max(pg_current_wal_insert_lsn() - restart_lsn), 0)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the position of slot %s: %w", slot, err)
	}
	return n, nil
}
