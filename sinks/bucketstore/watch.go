package bucketstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// watchAppName is the application_name of a watcher's LISTEN connection.
const watchAppName = "syncpipe_watch"

// querier is what reading the active group needs: the pool or a
// connection of its own.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ActiveCheckpoint returns the ACTIVE group and its latest checkpoint. ok
// is false when no group is active or the active group has published no
// checkpoint yet (a group becomes ACTIVE with its first checkpoint, so
// normally both go together). Safe for concurrent use.
func (s *Reader) ActiveCheckpoint(ctx context.Context) (Checkpoint, Group, bool, error) {
	return activeCheckpoint(ctx, s.pool)
}

func activeCheckpoint(ctx context.Context, q querier) (Checkpoint, Group, bool, error) {
	g, err := scanGroup(q.QueryRow(ctx, "SELECT "+groupColumns+
		" FROM groups WHERE state = 'ACTIVE' AND last_checkpoint IS NOT NULL ORDER BY id DESC LIMIT 1"))
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, Group{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, Group{}, false, fmt.Errorf("read active group: %w", err)
	}
	cp := Checkpoint{GroupID: g.ID, OpID: g.LastCheckpoint, LSN: g.LastCheckpointLSN, LSNText: g.LastCheckpointLSN.String()}
	return cp, g, true, nil
}

// CheckpointWatcher follows the ACTIVE group's checkpoints and fans them out
// to subscribers. Run one per process (Reader.WatchCheckpoints) and let every
// sync connection Subscribe; it holds one dedicated database connection
// regardless of the number of subscribers. Its methods are safe for
// concurrent use.
//
// What it delivers: checkpoints of the group that is ACTIVE when they are
// delivered, never going back within a group (op id and LSN only grow), a
// new value whenever the op id or the LSN moves (an LSN-only move matters
// to write checkpoints). When the active group changes, the new group's
// checkpoint is delivered (GroupID tells the subscriber to re-read its
// rules). Every delivered checkpoint is published, so all ops at or below
// it are committed and readable.
type CheckpointWatcher struct {
	s    *Reader
	done chan struct{}

	mu     sync.Mutex
	latest Checkpoint
	have   bool
	closed bool
	subs   map[chan Checkpoint]struct{}

	reconnects atomic.Int64
}

// WatchCheckpoints starts a watcher. It LISTENs on NotifyChannel on a
// dedicated connection (not from the pool) and, on every (re)connect and
// whenever a notification names a group other than the one it follows,
// re-reads the active group, so nothing published while it was
// disconnected is missed. A lost connection is re-established with
// exponential backoff (50 ms to 5 s). When ctx ends the watcher closes
// its connection and every subscriber channel, then Done closes.
func (s *Reader) WatchCheckpoints(ctx context.Context) *CheckpointWatcher {
	w := &CheckpointWatcher{s: s, done: make(chan struct{}), subs: map[chan Checkpoint]struct{}{}}
	go w.run(ctx)
	return w
}

// Subscribe returns a channel that receives the newest checkpoint: it holds
// at most one value, which a newer checkpoint replaces, so a slow reader
// only ever sees the latest (the current one, if known, is there at once).
// The channel is closed when ctx ends or the watcher stops.
func (w *CheckpointWatcher) Subscribe(ctx context.Context) <-chan Checkpoint {
	ch := make(chan Checkpoint, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		close(ch)
		return ch
	}
	if w.have {
		ch <- w.latest
	}
	w.subs[ch] = struct{}{}
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.subs[ch]; ok {
			delete(w.subs, ch)
			close(ch)
		}
	})
	return ch
}

// Latest returns the newest checkpoint delivered to subscribers; ok is
// false before the first. When it returns, every subscriber has been
// offered that checkpoint.
func (w *CheckpointWatcher) Latest() (cp Checkpoint, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest, w.have
}

// Done is closed when the watcher has stopped.
func (w *CheckpointWatcher) Done() <-chan struct{} { return w.done }

// Reconnects counts lost LISTEN connections, for metrics.
func (w *CheckpointWatcher) Reconnects() int64 { return w.reconnects.Load() }

// publish offers cp to every subscriber unless it is not newer than the
// latest of the same group.
func (w *CheckpointWatcher) publish(cp Checkpoint) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.have && cp.GroupID == w.latest.GroupID && cp.OpID <= w.latest.OpID && cp.LSN <= w.latest.LSN {
		return
	}
	w.latest, w.have = cp, true
	for ch := range w.subs {
		select {
		case ch <- cp:
		default:
			// Replace the unread value. Only publish sends, under w.mu, so
			// after the receive (or the reader's) there is room.
			select {
			case <-ch:
			default:
			}
			ch <- cp
		}
	}
}

func (w *CheckpointWatcher) run(ctx context.Context) {
	defer func() {
		w.mu.Lock()
		w.closed = true
		for ch := range w.subs {
			close(ch)
		}
		w.subs = nil
		w.mu.Unlock()
		close(w.done)
	}()
	const minBackoff, maxBackoff = 50 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		established, err := w.session(ctx)
		if ctx.Err() != nil {
			return
		}
		w.reconnects.Add(1)
		if established {
			backoff = minBackoff
		}
		w.s.log.Warn("checkpoint watcher: connection lost, reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// session connects, LISTENs, reads the active group and then follows
// notifications until the connection fails or ctx ends. established
// reports whether it got as far as listening.
func (w *CheckpointWatcher) session(ctx context.Context) (established bool, err error) {
	cfg := w.s.pool.Config().ConnConfig
	cfg.RuntimeParams["application_name"] = watchAppName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// LISTEN before reading: a checkpoint published in between is both in
	// the read and in a notification, never in neither.
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.s.notifyChannel()}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	active := 0
	reread := func() error {
		cp, _, ok, err := activeCheckpoint(ctx, conn)
		if err != nil {
			return err
		}
		if ok {
			active = cp.GroupID
			w.publish(cp)
		}
		return nil
	}
	if err := reread(); err != nil {
		return false, err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("wait for notification: %w", err)
		}
		var cp Checkpoint
		if err := json.Unmarshal([]byte(n.Payload), &cp); err == nil {
			cp.LSN, err = pglogrepl.ParseLSN(cp.LSNText)
			if err == nil && active != 0 && cp.GroupID == active {
				w.publish(cp)
				continue
			}
		}
		// Another group (perhaps newly active) or an unreadable payload:
		// ask storage which group is active now.
		if err := reread(); err != nil {
			return true, err
		}
	}
}
