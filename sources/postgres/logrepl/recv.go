package logrepl

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// pacedReaderKey is where Connect leaves a connection's pacedReader in
// pgconn.PgConn.CustomData, for Start to turn on.
const pacedReaderKey = "syncpipe/logrepl.pacedReader"

// paceWait is the least time between the starts of two socket reads of a
// streaming connection when the first found little waiting (less than
// half the room it had).
//
// Why: the walsender sends every change as a message of its own, and a
// reader that keeps up reads each one as it arrives: a system call, a
// poller wake-up and a goroutine switch per change, on both sides of the
// socket (the walsender then wakes a sleeping reader for every message).
// Letting a busy stream's messages gather for a moment makes each read
// take a dozen or more. Measured on a 200k-change catch-up (2 cores, TCP
// on one host, reader and walsender CPU together): 200 µs saved 0.5–1.6 µs
// per change; 1 ms saved nothing, as the walsender then found the socket
// full and waited for room. A quiet stream's change waits at most this
// long — about a millisecond when the process is idle, Go's timer
// granularity then.
const paceWait = 200 * time.Microsecond

// pacedReader reads a replication connection's socket, pacing the reads
// (see paceWait) while Start has turned it on.
type pacedReader struct {
	r     io.Reader
	on    atomic.Bool
	last  time.Time // when the last read returned
	short bool      // the last read took less than half the room it had
}

// Read reads from the socket, first waiting out paceWait since the last
// read when that one found little.
func (p *pacedReader) Read(b []byte) (int, error) {
	if p.short && p.on.Load() {
		if wait := paceWait - time.Since(p.last); wait > 0 {
			time.Sleep(wait)
		}
	}
	n, err := p.r.Read(b)
	p.last, p.short = time.Now(), n < len(b)/2
	return n, err
}

// pace turns the pacing of conn's reads on or off, if Connect made conn.
func pace(conn *pgconn.PgConn, on bool) {
	if p, ok := conn.CustomData()[pacedReaderKey].(*pacedReader); ok {
		p.on.Store(on)
	}
}
