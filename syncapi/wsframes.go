package syncapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// The frames of a WebSocket connection, in their order: the SETUP, the
// REQUEST_STREAM, then what the client sends while the stream runs.

// maxClientLifetime caps the max lifetime a SETUP may ask for: a client
// may go that long without a KEEPALIVE before it is closed. PowerSync's
// clients ask for 90 s; a lifetime of days (31 bits of milliseconds)
// would let a silent client that requests no lines hold a stream slot for
// as long, where an HTTP client that reads nothing is dropped within the
// write timeout.
const maxClientLifetime = 5 * time.Minute

// setupMetadata is the SETUP's metadata (PowerSync's JS client sends
// JSON; the service decodes BSON too).
type setupMetadata struct {
	Token     string `json:"token" bson:"token"`
	UserAgent string `json:"user_agent" bson:"user_agent"`
}

// setup reads the SETUP, authenticates its token as the HTTP
// Authorization header is, and takes a stream slot exactly as
// handleStream does. A refusal is an ERROR on stream 0 (REJECTED_SETUP
// with PowerSync's code, or the frame's own error code) and ok false;
// with ok true the caller holds a slot (release it).
func (c *wsConn) setup() (id identity, ok bool) {
	f, ok := c.frame()
	if !ok {
		return identity{}, false
	}
	if f.Type != rsocket.TypeSetup {
		c.refuse(&rsocket.Error{Code: rsocket.CodeInvalidSetup, Frame: f.Type, Field: "frame type", Problem: "the first frame must be a SETUP"})
		return identity{}, false
	}
	var err error
	if c.metaEnc, c.dataEnc, err = f.Setup.Encodings(); err != nil {
		c.refuse(err)
		return identity{}, false
	}
	c.lifetime = min(f.Setup.Lifetime(), maxClientLifetime)
	c.alive.Reset(c.lifetime)
	var meta setupMetadata
	if len(f.Metadata) > 0 {
		if err := decode(c.metaEnc, f.Metadata, &meta); err != nil {
			c.reject(&apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf("the SETUP metadata is not %s: %v", f.Setup.MetadataMIME, err)})
			return identity{}, false
		}
	}
	ctx, span := c.s.tracer.Start(c.ctx, "syncapi.auth")
	id, aerr := c.s.auth.authenticate(ctx, meta.Token)
	if aerr != nil {
		span.SetAttributes(attrCode.String(aerr.code))
	}
	span.End()
	if aerr != nil {
		c.reject(aerr)
		return identity{}, false
	}
	if !c.s.begin() {
		c.reject(&apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "the sync API is shutting down"})
		return identity{}, false
	}
	if n := c.s.active.Add(1); n > int64(c.s.cfg.MaxConcurrentConnections) {
		c.s.active.Add(-1)
		c.s.streams.Done()
		c.reject(&apiError{status: http.StatusTooManyRequests, code: codeTooManyConns,
			msg: fmt.Sprintf("maximum concurrent sync connections (%d, api.max_concurrent_connections) reached; retry in %s s",
				c.s.cfg.MaxConcurrentConnections, retryAfter)})
		return identity{}, false
	}
	c.log.Debug("sync websocket: setup accepted", "user", id.userID, "user_agent", meta.UserAgent,
		"keepalive", f.Setup.Keepalive(), "lifetime", c.lifetime)
	return id, true
}

// reject refuses the SETUP: ERROR REJECTED_SETUP on stream 0 carrying
// PowerSync's code, as its service does, then the close.
func (c *wsConn) reject(e *apiError) {
	if b, err := rsocket.AppendServiceError(nil, 0, rsocket.CodeRejectedSetup, e.code, e.msg); err == nil {
		_ = c.send(b)
	}
	c.close(websocket.StatusNormalClosure, "setup rejected", "setup rejected", "code", e.code, "err", e.msg)
}

// request reads frames up to the REQUEST_STREAM (answering KEEPALIVE) and
// parses its sync request as handleStream parses the body. An invalid
// request is an ERROR on its stream, and the connection closes.
func (c *wsConn) request() (*syncRequest, bool) {
	for {
		f, ok := c.frame()
		if !ok {
			return nil, false
		}
		switch f.Type {
		case rsocket.TypeKeepalive:
			if !c.keepalive(f) {
				return nil, false
			}
			continue
		case rsocket.TypeRequestStream:
		default:
			c.refuse(fmt.Errorf("a %v frame before the REQUEST_STREAM", f.Type))
			return nil, false
		}
		if f.StreamID%2 == 0 {
			c.refuse(fmt.Errorf("REQUEST_STREAM on stream %d: a client's streams are odd", f.StreamID))
			return nil, false
		}
		c.streamID, c.initialN = f.StreamID, f.N
		req, err := c.parseRequest(f)
		if err != nil {
			if b, aerr := rsocket.AppendServiceError(nil, f.StreamID, rsocket.CodeApplicationError, codeBadRequest, err.Error()); aerr == nil {
				_ = c.send(b)
			}
			c.close(websocket.StatusNormalClosure, "", "refused: invalid sync request", "err", err)
			return nil, false
		}
		return req, true
	}
}

// parseRequest checks the REQUEST_STREAM's route and parses its data.
func (c *wsConn) parseRequest(f rsocket.Frame) (*syncRequest, error) {
	if len(f.Metadata) > 0 {
		var route struct {
			Path string `json:"path" bson:"path"`
		}
		if err := decode(c.metaEnc, f.Metadata, &route); err != nil {
			return nil, fmt.Errorf("the REQUEST_STREAM metadata: %w", err)
		}
		if route.Path != syncPath {
			return nil, fmt.Errorf("the REQUEST_STREAM's path is %q: only %s is served", route.Path, syncPath)
		}
	}
	if int64(len(f.Data)) > c.s.cfg.MaxRequestBytes {
		return nil, fmt.Errorf("the sync request is larger than max_request_bytes (%d bytes)", c.s.cfg.MaxRequestBytes)
	}
	body, err := requestJSON(c.dataEnc, f.Data)
	if err != nil {
		return nil, err
	}
	req, err := parseSyncRequest(body)
	if err != nil {
		return nil, fmt.Errorf("invalid sync request: %w", err)
	}
	return req, nil
}

// keepalive notes that the client is alive and answers it if asked
// (RESPOND), with its data. It reports false when the answer failed.
func (c *wsConn) keepalive(f rsocket.Frame) bool {
	c.alive.Reset(c.lifetime)
	if f.Flags&rsocket.FlagRespond == 0 {
		return true
	}
	b, err := rsocket.AppendKeepalive(nil, false, 0, f.Data)
	if err == nil {
		err = c.send(b)
	}
	if err != nil {
		c.log.Debug("sync websocket: answer KEEPALIVE", "err", err)
		c.close(websocket.StatusNormalClosure, "", "")
		return false
	}
	return true
}

// expired closes a connection whose client sent no KEEPALIVE within the
// SETUP's max lifetime: it is gone, as the client would conclude of a
// server that did not answer for as long.
func (c *wsConn) expired() {
	c.halt()
	if b, err := rsocket.AppendError(nil, 0, rsocket.CodeConnectionError, "no KEEPALIVE within the max lifetime"); err == nil {
		_ = c.send(b)
	}
	c.close(websocket.StatusPolicyViolation, "no KEEPALIVE within the max lifetime",
		"closed: no KEEPALIVE within the max lifetime")
}

// readLoop handles the client's frames while the stream runs, until the
// connection ends: credit, cancellation, keepalives. A second request is
// REJECTED on its stream; what a client never sends is a protocol error.
func (c *wsConn) readLoop() {
	for {
		f, ok := c.frame()
		if !ok {
			return
		}
		switch f.Type {
		case rsocket.TypeRequestN:
			if f.StreamID == c.streamID {
				c.out.Load().grant(f.N)
			} // else a stream that ended: ignored, as RSocket allows
		case rsocket.TypeCancel:
			if f.StreamID == c.streamID {
				c.out.Load().cancel()
				c.cancelStream() // the stream ends, its slot is free
			}
		case rsocket.TypeKeepalive:
			if !c.keepalive(f) {
				return
			}
		case rsocket.TypeError:
			if f.StreamID == 0 || f.StreamID == c.streamID {
				c.close(websocket.StatusNormalClosure, "", "ended by the client's ERROR", "code", f.Code, "message", string(f.Data))
				return
			}
		case rsocket.TypeRequestStream:
			if f.StreamID%2 == 0 || f.StreamID <= c.streamID {
				c.refuse(fmt.Errorf("REQUEST_STREAM on stream %d: not a new client stream", f.StreamID))
				return
			}
			if b, err := rsocket.AppendError(nil, f.StreamID, rsocket.CodeRejected, "one sync stream per connection"); err == nil {
				if c.send(b) != nil {
					c.close(websocket.StatusNormalClosure, "", "")
					return
				}
			}
		default: // SETUP again, a PAYLOAD to the server's own stream
			c.refuse(errors.New("a " + f.Type.String() + " frame while the stream runs"))
			return
		}
	}
}
