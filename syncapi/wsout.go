package syncapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// wsOut is a sync stream's output on a WebSocket (RSocket) connection,
// behind the same lineWriter as HTTP's: each line, a BSON document, is
// the data of one PAYLOAD frame with NEXT, sent only against the credit
// the client's REQUEST_N frames gave (rsocket/doc.go "Flow control").
//
// A line waits for its credit here, on the stream's context and the
// token's expiry, never on the write timeout, which bounds only the
// socket write once the credit is there: a client that requests slowly
// holds its stream's goroutine and the one line in hand, and the stream
// produces the next line only once this one is sent, so the server's
// memory per stream stays bounded whatever the checkpoint's size.
type wsOut struct {
	ws      *websocket.Conn
	id      uint32        // the stream's id
	timeout time.Duration // bounds each frame's write (Config.WriteTimeout)
	// ctx is the stream's (CANCEL ends it): it ends a wait for credit.
	ctx context.Context
	// writes is the connection's, and also ends by stop
	// (lineWriter.abort): it ends a write in progress, which closes the
	// WebSocket (the library does). Not the stream's: a CANCEL must not
	// cut a frame in half and the connection with it.
	writes context.Context
	stop   context.CancelFunc
	// expires is the token's expiry (now its clock): a wait for credit
	// ends there, as the stream would.
	expires time.Time
	now     func() time.Time
	more    chan struct{} // a REQUEST_N added credit (one pending signal)
	waiting func()        // Server.waitCredit (tests), may be nil
	// completeDelay: how long end waits for the client to cancel before
	// it sends COMPLETE (Server.completeDelay).
	completeDelay time.Duration

	mu     sync.Mutex
	credit int64 // PAYLOADs requested and not yet sent, at most rsocket.MaxN
	// sending is held while a frame is checked against ended and sent,
	// so a connection ERROR (halt) follows every line sent.
	sending sync.Mutex
	ended   atomic.Bool // COMPLETE or ERROR sent, or CANCEL received: send nothing more

	// wire counts the bytes written to the connection (wswire.go),
	// counted those wireSince reported; deflate: the connection
	// compresses messages (the stream's content_encoding).
	wire    *atomic.Int64
	counted int64
	deflate bool
}

// wireSince returns the bytes written to the connection since its last
// call (the lineWriter's count of what a line cost on the wire): the
// line's frame, compressed or not, with its WebSocket header, and any
// keepalive answer sent meanwhile. Only the stream's goroutine calls it.
func (o *wsOut) wireSince() int64 {
	n := o.wire.Load()
	d := n - o.counted
	o.counted = n
	return d
}

// errNoCredit wraps the end of a wait for credit (with the reason).
var errNoCredit = errors.New("wait for REQUEST_N")

// maxKeptFrame: a frame buffer grown beyond it by a large line is
// dropped after the line instead of pooled (framePool).
const maxKeptFrame = 64 << 10

// newWSOut returns the output of stream id on ws: ctx is the stream's,
// conn the connection's; initial is the REQUEST_STREAM's initial request
// n.
func newWSOut(ctx, conn context.Context, ws *websocket.Conn, id, initial uint32, timeout time.Duration, expires time.Time, now func() time.Time) *wsOut {
	o := &wsOut{ws: ws, id: id, timeout: timeout, expires: expires, now: now, ctx: ctx,
		more: make(chan struct{}, 1), credit: int64(initial)}
	o.writes, o.stop = context.WithCancel(conn)
	return o
}

// grant adds a REQUEST_N's n to the credit, saturating at 2^31-1 (what
// RSocket calls unbounded), and wakes a waiting line.
func (o *wsOut) grant(n uint32) {
	o.mu.Lock()
	o.credit = min(o.credit+int64(n), rsocket.MaxN)
	o.mu.Unlock()
	select {
	case o.more <- struct{}{}:
	default:
	}
}

// cancel marks the stream cancelled by the client: nothing more is sent
// on it, not even its end. It does not wait for a frame being sent. The
// caller cancels the stream's context.
func (o *wsOut) cancel() { o.ended.Store(true) }

// halt is cancel for an ERROR on stream 0 about to be sent: it waits for
// the frame being sent, if any, so that none follows the ERROR.
func (o *wsOut) halt() {
	o.sending.Lock()
	o.ended.Store(true)
	o.sending.Unlock()
}

// take spends one credit, waiting for a REQUEST_N while there is none.
func (o *wsOut) take() error {
	var expiry *time.Timer
	for {
		o.mu.Lock()
		if o.credit > 0 {
			o.credit--
			o.mu.Unlock()
			return nil
		}
		o.mu.Unlock()
		if o.waiting != nil {
			o.waiting()
		}
		if expiry == nil {
			expiry = time.NewTimer(o.expires.Sub(o.now()))
			defer expiry.Stop()
		}
		select {
		case <-o.more:
		case <-o.ctx.Done():
			return fmt.Errorf("%w: %w", errNoCredit, o.ctx.Err())
		case <-expiry.C:
			return fmt.Errorf("%w: %w", errNoCredit, errTokenExpired)
		}
	}
}

// Write sends p, one sync line, as one PAYLOAD with NEXT once the client
// has requested it.
func (o *wsOut) Write(p []byte) (int, error) {
	if err := o.take(); err != nil {
		return 0, err
	}
	fb := getFrame()
	defer putFrame(fb)
	b, err := rsocket.AppendPayload((*fb)[:0], o.id, nil, p, rsocket.FlagNext)
	*fb = b
	if err != nil {
		return 0, fmt.Errorf("encode PAYLOAD: %w", err)
	}
	if err := o.send(b, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// framePool holds the buffers PAYLOAD frames are encoded into, shared by
// every stream: only a stream sending a line holds one, so an idle
// stream keeps none (a kept buffer cost each of the Load scenario's
// thousand idle connections the size of its largest line).
var framePool sync.Pool

func getFrame() *[]byte {
	if b, ok := framePool.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

// putFrame returns b unless a large line grew it beyond maxKeptFrame:
// that one is left to the collector instead of pinned by the pool.
func putFrame(b *[]byte) {
	if cap(*b) <= maxKeptFrame {
		framePool.Put(b)
	}
}

// errEnded: the stream ended (CANCEL, or the connection's ERROR) while a
// line was in hand.
var errEnded = errors.New("the stream was cancelled")

// send writes one frame within the write timeout, unless the stream has
// ended (last: the frame ends it). A write that times out or is aborted
// closes the WebSocket (the library does): the client is gone or
// stalled.
func (o *wsOut) send(frame []byte, last bool) error {
	o.sending.Lock()
	defer o.sending.Unlock()
	if last && o.ended.Swap(true) || !last && o.ended.Load() {
		return errEnded
	}
	ctx, cancel := context.WithTimeout(o.writes, o.timeout)
	defer cancel()
	if err := o.ws.Write(ctx, websocket.MessageBinary, frame); err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	return nil
}

// SetWriteDeadline only aborts: lineWriter.abort sets a deadline now to
// end a stream blocked on its client. The write timeout itself is
// counted from when the credit is there (send), not from the line's
// start, since waiting for credit is the client's right.
func (o *wsOut) SetWriteDeadline(t time.Time) error {
	if !t.After(time.Now()) {
		o.stop()
	}
	return nil
}

// Flush does nothing: each frame is sent whole at once.
func (o *wsOut) Flush() error { return nil }

// end sends the stream's end, a PAYLOAD with COMPLETE alone (it uses no
// credit), unless the stream ended otherwise (an ERROR, a CANCEL, the
// connection or the server closing).
//
// It first gives the client up to completeDelay to end the stream
// itself. A stream ends without an error only at the token's expiry,
// after its token_expires_in 0 line, on which the JS SDK fetches a new
// token and cancels the stream; but a COMPLETE arriving while that line
// still waits in the SDK's queue drops it (the SDK then reconnected with
// its expired token, refused, and only later fetched a new one). Over
// HTTP the body's end follows the line in order, so there is no race.
func (o *wsOut) end() error {
	if o.ended.Load() {
		return nil // after an ERROR, or a CANCEL
	}
	if o.completeDelay > 0 {
		wait := time.NewTimer(o.completeDelay)
		select {
		case <-o.ctx.Done():
		case <-o.writes.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
	if o.ctx.Err() != nil {
		return nil
	}
	b, err := rsocket.AppendPayload(nil, o.id, nil, nil, rsocket.FlagComplete)
	if err != nil {
		return fmt.Errorf("encode PAYLOAD: %w", err)
	}
	return o.sendLast(b)
}

// sendLast sends the frame that ends the stream, if it has not ended.
func (o *wsOut) sendLast(b []byte) error {
	if err := o.send(b, true); err != nil && !errors.Is(err, errEnded) {
		return err
	}
	return nil
}

// streamError sends an error that ends the stream as an ERROR frame on
// it, APPLICATION_ERROR with PowerSync's "[code] message" (the clients
// read the code from it), instead of an error line; no credit needed.
func (o *wsOut) streamError(code, msg string) error {
	if o.ctx.Err() != nil {
		return nil
	}
	b, err := rsocket.AppendServiceError(nil, o.id, rsocket.CodeApplicationError, code, msg)
	if err != nil {
		return fmt.Errorf("encode ERROR: %w", err)
	}
	return o.sendLast(b)
}
