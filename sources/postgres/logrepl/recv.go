package logrepl

import (
	"net"
	"sync"
	"time"
)

// recvDeadline bounds the reader goroutine's receives with the socket's
// read deadline instead of a context.
//
// Why: pgconn watches a receive's context with a goroutine of its own
// (started and stopped per call), and the stream receives once per change:
// at tens of thousands of changes a second that watcher cost more CPU than
// decoding the change. The deadline is only moved when a receive needs an
// earlier wake-up or the old one passed, and Close reaches a blocked
// receive by setting a deadline in the past (stop).
type recvDeadline struct {
	conn net.Conn
	set  time.Time // the deadline in force; zero: none

	mu      sync.Mutex // orders stop against arm and release
	stopped bool       // the stream is closing: receives fail at once
	ended   bool       // the reader released the socket: stop does nothing
}

// arm makes the next receive return by wake at the latest. It reports
// false once the stream is stopping (nothing more should be received).
func (d *recvDeadline) arm(wake time.Time) (bool, error) {
	if !d.set.IsZero() && !wake.Before(d.set) && time.Now().Before(d.set) {
		return true, nil // the deadline in force still comes first
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return false, nil
	}
	d.set = wake
	return true, d.conn.SetReadDeadline(wake)
}

// stop makes a blocked or later receive fail at once (Close).
func (d *recvDeadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if !d.ended {
		_ = d.conn.SetReadDeadline(time.Unix(1, 0))
	}
}

// release clears the deadline when the reader exits, so that Close's
// final exchange on the connection is bounded only by its own context.
func (d *recvDeadline) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ended = true
	_ = d.conn.SetReadDeadline(time.Time{})
}
