package syncapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// The WebSocket transport (issue 43): GET /sync/stream upgraded to a
// WebSocket is an RSocket connection (rsocket/doc.go has the protocol and
// this design). It is a thin layer: the sync request goes through
// parseSyncRequest and the stream through serveStream, as over HTTP; only
// the lines' output (wsOut) and the connection's frames are its own.

// metadataRoom is what a connection may read beyond MaxRequestBytes in
// one message: a frame's header and metadata (the SETUP's token, the
// REQUEST_STREAM's route).
const metadataRoom = 64 << 10

// syncPath is the route a REQUEST_STREAM's metadata names.
const syncPath = "/sync/stream"

// handleWebSocket upgrades GET /sync/stream and serves the RSocket
// connection on a goroutine of its own, so net/http's goroutine for the
// connection, and its stack, end here (as rawOut's do).
//
// Origins are not checked: auth comes in the SETUP's metadata, never
// from cookies, so a page of another origin gets nothing it could not
// get with a token it holds already (the reasoning of cors.go's "*"), and
// browser apps connect from their own origins.
func (s *Server) handleWebSocket(w http.ResponseWriter, r *http.Request) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, &apiError{status: http.StatusUpgradeRequired, code: codeBadRequest,
			msg: "GET /sync/stream is the WebSocket (RSocket) transport: send Upgrade: websocket, or POST the request for an HTTP stream"})
		return
	}
	// The HTTP server's request deadlines (cli/api.go's ReadTimeout) would
	// stay on the connection handed over, as they do for takeOver: none
	// from here, the connection bounds its own phases.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	// Counted by the ConnGuard (if any) as pending until the SETUP is
	// accepted: upgrades that never send one are evicted as stalled
	// requests are.
	pending := markUpgrading(r.Context())
	wire := &wireCounter{ResponseWriter: w}
	ws, err := websocket.Accept(wire, r, &websocket.AcceptOptions{InsecureSkipVerify: true,
		CompressionMode: websocket.CompressionNoContextTakeover, CompressionThreshold: wsDeflateThreshold})
	if err != nil { // Accept answered the client
		s.log.Info("sync websocket: upgrade refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	ws.SetReadLimit(s.cfg.MaxRequestBytes + metadataRoom)
	c := &wsConn{s: s, ws: ws, wire: &wire.written, deflate: negotiatedDeflate(w.Header()), pending: pending,
		log: s.log.With("remote", r.RemoteAddr, "transport", transportWebSocket)}
	// The connection outlives the request: its context is the server's.
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	c.streamCtx, c.cancelStream = context.WithCancel(c.ctx)
	// Armed by the SETUP, which says the client's max lifetime.
	c.alive = time.AfterFunc(time.Hour, c.expired)
	c.alive.Stop()
	go c.serve()
}

// headerHasToken reports whether a comma-separated header lists token
// (case-insensitive).
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsConn is one RSocket connection. Its goroutine (serve) reads the
// SETUP and the REQUEST_STREAM, then runs the stream while a reader
// goroutine handles the client's frames.
type wsConn struct {
	s   *Server
	ws  *websocket.Conn
	log *slog.Logger // never reassigned: timers log through it
	// wire counts the bytes written to the connection (wswire.go);
	// deflate: the connection took per-message deflate.
	wire    *atomic.Int64
	deflate bool
	// ctx is the connection's: it ends when the connection fails or
	// closes, and with the server.
	ctx    context.Context
	cancel context.CancelFunc

	rbuf    []byte       // the message read last
	pending *guardedConn // the ConnGuard's, counted until the SETUP (may be nil)

	dataEnc  rsocket.Encoding // of the REQUEST_STREAM's data
	metaEnc  rsocket.Encoding // of every metadata
	lifetime time.Duration    // the SETUP's max lifetime
	alive    *time.Timer      // closes a client silent for a lifetime

	closeOnce sync.Once

	// The stream's context, which CANCEL ends (and the connection's end).
	streamCtx    context.Context
	cancelStream context.CancelFunc
	// The stream, once requested (set before the reader starts): its id,
	// the REQUEST_STREAM's initial request n, its output.
	streamID uint32
	initialN uint32
	out      atomic.Pointer[wsOut] // nil before the stream (timers read it)
}

// serve runs the connection to its end.
func (c *wsConn) serve() {
	defer c.s.recoverStream()
	defer c.cancel()
	// serve returns once the reader has ended: no KEEPALIVE arms it again.
	defer c.alive.Stop()
	// The SETUP and the REQUEST_STREAM arrive at once from every client:
	// as long as a request body may take. Until the SETUP, the ConnGuard
	// also counts the connection among the pending ones.
	slow := time.AfterFunc(c.s.cfg.BodyReadTimeout, func() {
		c.close(websocket.StatusPolicyViolation, "no SETUP and REQUEST_STREAM in time",
			"closed: SETUP and REQUEST_STREAM did not arrive in time", "limit", c.s.cfg.BodyReadTimeout)
	})
	id, ok := c.setup()
	if !ok {
		slow.Stop()
		c.close(websocket.StatusNormalClosure, "", "")
		return
	}
	// From here the connection holds a slot (setup took it), which bounds
	// it instead of the ConnGuard.
	c.pending.streaming()
	req, ok := c.request()
	if !slow.Stop() || !ok {
		c.s.release()
		c.close(websocket.StatusNormalClosure, "", "")
		return
	}
	c.run(id, req)
}

// run serves the requested stream with the engine HTTP's streams use,
// then ends the connection: PowerSync clients open one stream per
// connection, and the slot is the stream's.
func (c *wsConn) run(id identity, req *syncRequest) {
	out := newWSOut(c.streamCtx, c.ctx, c.ws, c.streamID, c.initialN, c.s.cfg.WriteTimeout, id.expires, c.s.cfg.Now)
	out.wire, out.deflate = c.wire, c.deflate
	out.waiting = c.s.waitCredit
	out.completeDelay = c.s.completeDelay
	c.out.Store(out)
	lw := &lineWriter{out: out, bson: true, timeout: c.s.cfg.WriteTimeout}
	sc := newConn(c.s, id, req, lw)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer c.s.recoverStream()
		c.readLoop()
	}()
	c.s.serveStream(c.streamCtx, c.cancelStream, sc, nil)
	// The client closes the connection once it has handled the stream's
	// end (its slot is free already). Closing it here at once lost the
	// last lines: the JS SDK drops the lines it has not handled yet when
	// the WebSocket closes (the real client missed token_expires_in 0 and
	// reconnected with its expired token). A client that does not close
	// is closed after streamEndGrace.
	grace := time.NewTimer(streamEndGrace)
	select {
	case <-read:
	case <-grace.C:
	}
	grace.Stop()
	c.close(websocket.StatusNormalClosure, "", "")
	<-read // bounded: the connection is closed
}

// streamEndGrace is how long a connection stays open after its stream
// ended, for the client to close it; completeDelay (Server's default) how
// long a stream that ends without an error waits for its client to
// cancel it before it sends COMPLETE (wsOut.end).
const (
	streamEndGrace = 5 * time.Second
	completeDelay  = 5 * time.Second
)

// close closes the connection with a WebSocket close code once; logMsg,
// when set, is logged (at Info: hostile or broken clients) with args.
// Safe from any goroutine.
func (c *wsConn) close(code websocket.StatusCode, reason, logMsg string, args ...any) {
	c.closeOnce.Do(func() {
		if logMsg != "" {
			c.log.Info("sync websocket "+logMsg, args...)
		}
		if c.alive != nil {
			c.alive.Stop()
		}
		// The stream first: its slot is free at once, whatever the close
		// handshake takes.
		c.cancelStream()
		// Close sends the close frame and waits for the client's (the
		// library bounds both), then the reader ends.
		_ = c.ws.Close(code, reason)
		c.cancel()
	})
}

// send writes one frame, within the write timeout. Frames other than
// the stream's lines are rare (an answer to a keepalive every 20 s, an
// error), so each is built anew: several goroutines send them.
func (c *wsConn) send(frame []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.WriteTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageBinary, frame); err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	return nil
}

// halt stops the stream's frames, if any, before an ERROR on stream 0:
// no line follows that ERROR. The stream itself ends with the close
// (ended now, it would close the connection before the ERROR is sent).
func (c *wsConn) halt() {
	if out := c.out.Load(); out != nil {
		out.halt()
	}
}

// refuse answers an *rsocket.Error (or another failure, as
// CONNECTION_ERROR) with an ERROR frame on stream 0 and closes: the
// connection is not one a PowerSync client would send.
func (c *wsConn) refuse(err error) {
	c.halt()
	code := rsocket.CodeConnectionError
	if fe := (*rsocket.Error)(nil); errors.As(err, &fe) {
		code = fe.Code
	}
	if b, aerr := rsocket.AppendError(nil, 0, code, err.Error()); aerr == nil {
		_ = c.send(b)
	}
	c.close(websocket.StatusPolicyViolation, "protocol error", "closed: protocol error", "code", code, "err", err)
}

// read reads the next message into c.rbuf (reused: the client sends a
// REQUEST_N per line it consumes). A text message, an oversized one (the
// library closes with 1009) or a failed read ends the connection: ok is
// false, and it was logged if it was the client's fault.
func (c *wsConn) read() (b []byte, ok bool) {
	typ, r, err := c.ws.Reader(c.ctx)
	if err == nil {
		b, err = readAll(r, c.rbuf[:0])
		c.rbuf = b
	}
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		c.close(websocket.StatusMessageTooBig, "", "closed: message too big", "limit", c.s.cfg.MaxRequestBytes+metadataRoom)
		return nil, false
	case err != nil:
		c.log.Debug("sync websocket: connection ended", "err", err)
		c.close(websocket.StatusNormalClosure, "", "")
		return nil, false
	case typ != websocket.MessageBinary:
		c.refuse(errors.New("a text message: RSocket frames are binary messages"))
		return nil, false
	}
	if cap(c.rbuf) > maxKeptFrame {
		c.rbuf = nil // after the SETUP or a large request: b stays valid
	}
	return b, true
}

// readAll appends r's bytes to b.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// frame reads and parses the next frame, skipping those to ignore; a
// frame that cannot be served is refused (the connection closes).
func (c *wsConn) frame() (rsocket.Frame, bool) {
	for {
		b, ok := c.read()
		if !ok {
			return rsocket.Frame{}, false
		}
		f, err := rsocket.Parse(b)
		if errors.Is(err, rsocket.ErrIgnored) {
			continue
		}
		if err != nil {
			c.refuse(err)
			return f, false
		}
		return f, true
	}
}

// decode decodes a metadata or data payload of encoding enc into v.
func decode(enc rsocket.Encoding, b []byte, v any) error {
	if enc == rsocket.EncodingBSON {
		return bson.Unmarshal(b, v)
	}
	return json.Unmarshal(b, v)
}

// requestJSON returns a REQUEST_STREAM's data as the JSON parseSyncRequest
// reads: BSON is converted (relaxed extended JSON: numbers stay numbers).
func requestJSON(enc rsocket.Encoding, b []byte) ([]byte, error) {
	if enc != rsocket.EncodingBSON || len(b) == 0 {
		return b, nil
	}
	if err := bson.Raw(b).Validate(); err != nil {
		return nil, fmt.Errorf("the BSON request: %w", err)
	}
	js, err := bson.MarshalExtJSON(bson.Raw(b), false, false)
	if err != nil {
		return nil, fmt.Errorf("the BSON request: %w", err)
	}
	return js, nil
}
