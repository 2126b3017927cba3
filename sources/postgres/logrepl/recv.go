package logrepl

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
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

// batchingReaderKey is where Connect leaves a connection's batchingReader
// in pgconn.PgConn.CustomData, for Start to turn on.
const batchingReaderKey = "syncpipe/logrepl.batchingReader"

// A busy stream's socket is read in batches: once a stream delivers
// messages quickly, its socket's SO_RCVLOWAT is raised to lowatBytes, so
// that the kernel wakes the reader only when that much is waiting, and the
// reader's deadline is at most lowatTick away, to take what little came
// when the stream slows down.
//
// Why: the walsender sends every change as a message of its own, and a
// reader that keeps up reads each one as it arrives — a poller wake-up, a
// system call and a goroutine switch per change, which cost the process
// more than decoding the change, and the walsender pays for waking the
// reader every time. Measured on a 200k-change catch-up (2 cores, TCP on
// one host), CPU per change unbatched → batched: reader 4.4–5.6 → 3.2–3.9
// µs, walsender 5.7–6.7 → 4.8–5.8 µs. (Sleeping between reads instead
// saved less, and at a millisecond made the walsender wait for room.)
//
// A stream counts as busy after busyReads reads within busyWindow, and
// quiet again when a read finds less than idleBytes: a quiet stream is
// read as before, message by message, and wakes for nothing.
const (
	lowatBytes = 16 << 10
	lowatTick  = time.Millisecond
	busyReads  = 32
	busyWindow = 5 * time.Millisecond
	idleBytes  = 2 << 10
)

// batchingReader reads a replication connection's socket and switches its
// batching (see lowatBytes) on and off as the stream gets busy and quiet.
// Only the goroutine reading the connection calls Read, start and stop.
type batchingReader struct {
	r    io.Reader
	sock syscall.RawConn // the TCP socket; nil: no batching (not TCP)
	busy atomic.Bool     // SO_RCVLOWAT is raised; read by the stream's loop

	window time.Time // start of the current busyWindow
	reads  int       // reads in it
}

// Read reads from the socket and judges the stream's pace by the read.
func (b *batchingReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.sock == nil || n == 0 {
		return n, err
	}
	if b.busy.Load() {
		if n < idleBytes && n < len(p)/2 {
			b.batch(false)
		}
		return n, err
	}
	if now := time.Now(); now.Sub(b.window) > busyWindow {
		b.window, b.reads = now, 0
	}
	if b.reads++; b.reads >= busyReads {
		b.batch(true)
	}
	return n, err
}

// batch raises or resets the socket's SO_RCVLOWAT. A failure leaves the
// socket as it was and batching off.
func (b *batchingReader) batch(on bool) {
	lowat := 1
	if on {
		lowat = lowatBytes
	}
	var err error
	cerr := b.sock.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, lowat)
	})
	b.busy.Store(on && err == nil && cerr == nil)
	b.reads = 0
}

// batchingFor returns conn's batchingReader, if Connect made conn.
func batchingFor(conn *pgconn.PgConn) *batchingReader {
	b, _ := conn.CustomData()[batchingReaderKey].(*batchingReader)
	return b
}

// start lets the reader batch reads of conn's socket (if it is TCP, also
// under TLS) from now on.
func (b *batchingReader) start(c net.Conn) {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = t.NetConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			b.sock = rc
		}
	}
}

// stop ends batching: the commands after a stream read small replies.
func (b *batchingReader) stop() {
	if b.sock != nil && b.busy.Load() {
		b.batch(false)
	}
	b.sock = nil
}
