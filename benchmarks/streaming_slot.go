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
// re-decode, nor does the decode-only baseline on its fresh slot. With
// several targets (topologies, binaries) every slot must be moved on: each
// decodes all of the source's WAL.

// settleTimeout bounds settle; the slots' lag is reported either way.
const settleTimeout = 90 * time.Second

// settle moves every target's slot on past the source's current position.
// A syncpipe child per target streams (the measured ones have stopped, so
// their stage summaries, CPU and RSS stay the catch-ups'), reporting its
// position every second, while the harness writes a syncpipe heartbeat
// message a second — positions for syncpipe to confirm — and has a
// running-transactions record logged at once (nudge) instead of waiting up
// to 15 s for the background writer's, until every slot's restart_lsn has
// passed the position. No CHECKPOINT: the full-page images after one would
// inflate the next updates' WAL. It returns how long that took and gives
// up, with a log line, after settleTimeout.
func (sr *streamRun) settle(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	slots := make([]string, len(sr.targets))
	for i, t := range sr.targets {
		slot, err := sr.groupSlot(ctx, t)
		if err != nil {
			return 0, err
		}
		slots[i] = slot
	}
	var target string
	if err := sr.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		return 0, fmt.Errorf("settle: %w", err)
	}
	children := make([]*Child, 0, len(sr.targets))
	defer func() {
		for _, c := range children {
			_, _ = c.Stop()
		}
	}()
	for _, t := range sr.targets {
		cfg := strings.Replace(t.cfg, "\nreplication:\n", "\nreplication:\n  stream: {status_interval: 1s}\n", 1)
		child, err := StartChild(ctx, t.h.childOptions(cfg, "replication"))
		if err != nil {
			return 0, err
		}
		children = append(children, child)
	}
	err := sr.settleWith(ctx, children, slots, target)
	for _, c := range children {
		if _, stopErr := c.Stop(); err == nil {
			err = stopErr
		}
	}
	children = nil
	logf(sr.opt.Log, "slots moved on past %s in %s", target, time.Since(start).Round(time.Millisecond))
	return time.Since(start), err
}

func (sr *streamRun) settleWith(ctx context.Context, children []*Child, slots []string, target string) error {
	for _, c := range children {
		if _, err := c.WaitFor(ctx, "streaming from the replication slot"); err != nil {
			return err
		}
	}
	start := time.Now()
	var last, nudged time.Time
	for time.Since(start) < settleTimeout {
		if time.Since(nudged) >= 2*time.Second {
			sr.nudge(ctx)
			nudged = time.Now()
		}
		if time.Since(last) >= time.Second {
			if _, err := sr.src.Exec(ctx, "SELECT pg_logical_emit_message(false, 'syncpipe', 'bench settle')"); err != nil {
				return fmt.Errorf("settle: %w", err)
			}
			last = time.Now()
		}
		var passed bool
		if err := sr.src.QueryRow(ctx, `SELECT count(*) = $3 AND coalesce(bool_and(restart_lsn >= $2::pg_lsn), false)
			FROM pg_replication_slots WHERE slot_name = ANY($1)`, slots, target, len(slots)).Scan(&passed); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if passed {
			return nil
		}
		for _, c := range children {
			if childExited(c) {
				return fmt.Errorf("syncpipe exited while its slot advanced:\n%s", c.Tail())
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	logf(sr.opt.Log, "slots %v: restart_lsn still before %s after %s", slots, target, settleTimeout)
	return nil
}

// nudge has the source log a running-transactions record now: creating a
// logical slot does (so that its decoding can start), and a temporary one
// dropped right away leaves nothing behind. A walsender moves its slot's
// restart_lsn only past such a record, which otherwise comes with a
// checkpoint or from the background writer every 15 s. Failures are
// ignored: the background writer's record comes anyway.
func (sr *streamRun) nudge(ctx context.Context) {
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := sr.src.Exec(nctx, `SELECT pg_create_logical_replication_slot('bench_nudge', 'pgoutput', true)`)
	if err == nil {
		_, err = sr.src.Exec(nctx, `SELECT pg_drop_replication_slot('bench_nudge')`)
	}
	if err != nil {
		logf(sr.opt.Log, "settle: nudge: %v", err)
	}
}

// groupSlot is the replication slot of t's active group.
func (sr *streamRun) groupSlot(ctx context.Context, t *streamTarget) (string, error) {
	var slot string
	if err := t.storage.QueryRow(ctx, `SELECT slot_name FROM syncpipe.groups WHERE state = 'ACTIVE' ORDER BY id DESC LIMIT 1`).Scan(&slot); err != nil {
		return "", fmt.Errorf("read the group's slot: %w", err)
	}
	return slot, nil
}

// groupSlotBehind is slotBehind for t's active group's slot.
func (sr *streamRun) groupSlotBehind(ctx context.Context, t *streamTarget) (int64, error) {
	slot, err := sr.groupSlot(ctx, t)
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
