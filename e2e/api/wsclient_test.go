package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/syncpipe/syncpipe/internal/testkit/rsocketclient"
	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// frameWait bounds every wait for one frame from the server: a line, an
// ERROR, a close. Generous, for a race-built child on a busy machine.
const frameWait = 30 * time.Second

// wsClient is a PowerSync client of the running binary's WebSocket
// transport (RSocket over GET /sync/stream), with the frames
// internal/testkit/rsocketclient writes, as the JS SDK sends them, and
// one stream (id 1) per connection as the SDK opens.
type wsClient struct {
	t  testing.TB
	ws *websocket.Conn
}

// dialWS opens a WebSocket to api's /sync/stream; the connection is
// dropped when the test ends.
func dialWS(t testing.TB, ctx context.Context, api string) *wsClient {
	t.Helper()
	return dialWSWith(t, ctx, api, nil)
}

// dialWSWith is dialWS with opts (say, per-message deflate offered).
func dialWSWith(t testing.TB, ctx context.Context, api string, opts *websocket.DialOptions) *wsClient {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, frameWait)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, "ws://"+api+"/sync/stream", opts)
	if err != nil {
		t.Fatalf("dial the sync WebSocket: %v", err)
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	ws.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &wsClient{t: t, ws: ws}
}

// send writes one frame.
func (c *wsClient) send(ctx context.Context, frame []byte) {
	c.t.Helper()
	wctx, cancel := context.WithTimeout(ctx, frameWait)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageBinary, frame); err != nil {
		c.t.Fatalf("send a frame: %v", err)
	}
}

// open sends the SETUP for tok, with the keepalive interval and lifetime
// given (ms), and the REQUEST_STREAM asking for n lines at first.
func (c *wsClient) open(ctx context.Context, tok string, n, keepaliveMS, lifetimeMS uint32) {
	c.t.Helper()
	meta, err := json.Marshal(map[string]string{"token": "Token " + tok, "user_agent": "syncpipe-e2e/1"})
	if err != nil {
		c.t.Fatal(err)
	}
	c.send(ctx, rsocketclient.Setup(meta, keepaliveMS, lifetimeMS))
	c.send(ctx, rsocketclient.RequestStream(1, n, []byte(`{"raw_data":true,"buckets":[]}`)))
}

// openSDK opens a stream as the SDK does: 20 s keepalive, 90 s lifetime.
func (c *wsClient) openSDK(ctx context.Context, tok string, n uint32) {
	c.t.Helper()
	c.open(ctx, tok, n, 20000, 90000)
}

// frame reads the next frame within frameWait; err is the connection's
// end (or the wait's).
func (c *wsClient) frame(ctx context.Context) (rsocket.Frame, error) {
	c.t.Helper()
	rctx, cancel := context.WithTimeout(ctx, frameWait)
	defer cancel()
	typ, b, err := c.ws.Read(rctx)
	if err != nil {
		return rsocket.Frame{}, err
	}
	if typ != websocket.MessageBinary {
		c.t.Fatalf("a %v message from the server: RSocket frames are binary", typ)
	}
	f, err := rsocket.Parse(b)
	if err != nil {
		c.t.Fatalf("server frame %.64x: %v", b, err)
	}
	return f, nil
}

// line reads the next sync line, a PAYLOAD with NEXT on stream 1, and
// returns its kind (the BSON document's first key: checkpoint, data,
// checkpoint_complete, token_expires_in…) and size. KEEPALIVE answers
// are skipped; anything else fails the test.
func (c *wsClient) line(ctx context.Context) (kind string, size int) {
	c.t.Helper()
	for {
		f, err := c.frame(ctx)
		if err != nil {
			c.t.Fatalf("waiting for a sync line: %v", err)
		}
		switch {
		case f.Type == rsocket.TypeKeepalive:
			continue
		case f.Type == rsocket.TypePayload && f.StreamID == 1 && f.Flags&rsocket.FlagNext != 0:
			elems, err := bson.Raw(f.Data).Elements()
			if err != nil || len(elems) == 0 {
				c.t.Fatalf("a sync line that is not a BSON document (%v): %.64x", err, f.Data)
			}
			return elems[0].Key(), len(f.Data)
		}
		c.t.Fatalf("a %v frame (stream %d, code %v, %q), want a sync line", f.Type, f.StreamID, f.Code, f.Data)
	}
}

// untilComplete reads lines, with a REQUEST_N 1 for each, up to the next
// checkpoint_complete, and returns how many it read.
func (c *wsClient) untilComplete(ctx context.Context) int {
	c.t.Helper()
	for n := 1; ; n++ {
		kind, _ := c.line(ctx)
		c.send(ctx, rsocketclient.RequestN(1, 1))
		if kind == "checkpoint_complete" {
			return n
		}
	}
}

// until reads frames up to a sync line holding text (true) or the
// connection's end (false). It grants no credit: the stream must have
// been opened with enough.
func (c *wsClient) until(ctx context.Context, text string) bool {
	c.t.Helper()
	for {
		f, err := c.frame(ctx)
		if err != nil {
			return false
		}
		if f.Type == rsocket.TypePayload && f.Flags&rsocket.FlagNext != 0 && bytes.Contains(f.Data, []byte(text)) {
			return true
		}
	}
}

// untilEnd reads frames until the connection ends (within frameWait of
// the last frame).
func (c *wsClient) untilEnd(ctx context.Context) {
	c.t.Helper()
	for {
		if _, err := c.frame(ctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				c.t.Fatalf("the connection is still open %s after its last frame", frameWait)
			}
			return
		}
	}
}

// refused reads up to an ERROR frame, expects the close after it, and
// returns the ERROR and the close code.
func (c *wsClient) refused(ctx context.Context) (rsocket.Frame, websocket.StatusCode) {
	c.t.Helper()
	for {
		f, err := c.frame(ctx)
		if err != nil {
			c.t.Fatalf("connection ended without an ERROR frame: %v", err)
		}
		if f.Type == rsocket.TypeError {
			return f, c.closed(ctx)
		}
	}
}

// closed expects the connection to end with a WebSocket close frame
// (KEEPALIVE answers aside) and returns its code.
func (c *wsClient) closed(ctx context.Context) websocket.StatusCode {
	c.t.Helper()
	for {
		f, err := c.frame(ctx)
		if err == nil {
			if f.Type != rsocket.TypeKeepalive {
				c.t.Fatalf("a %v frame (stream %d, %q) where the close was expected", f.Type, f.StreamID, f.Data)
			}
			continue
		}
		if errors.Is(err, context.DeadlineExceeded) {
			c.t.Fatalf("no close within %s", frameWait)
		}
		code := websocket.CloseStatus(err)
		if code == -1 {
			c.t.Fatalf("connection dropped without a close frame: %v", err)
		}
		return code
	}
}

// pong sends a KEEPALIVE with RESPOND and reads up to its answer: every
// frame the client sent before it has been handled by the server's
// reader, which handles them in order. Lines read meanwhile are counted.
func (c *wsClient) pong(ctx context.Context, probe string) (lines int) {
	c.t.Helper()
	c.send(ctx, rsocketclient.Keepalive(probe))
	for {
		f, err := c.frame(ctx)
		if err != nil {
			c.t.Fatalf("waiting for the KEEPALIVE answer %q: %v", probe, err)
		}
		switch {
		case f.Type == rsocket.TypeKeepalive && string(f.Data) == probe:
			return lines
		case f.Type == rsocket.TypePayload:
			lines++
		default:
			c.t.Fatalf("a %v frame (stream %d, code %v, %q) before the KEEPALIVE answer", f.Type, f.StreamID, f.Code, f.Data)
		}
	}
}

// tooMany reports whether an ERROR frame is the SETUP's refusal for too
// many connections: REJECTED_SETUP on stream 0 with PSYNC_S2304.
func tooMany(f rsocket.Frame) bool {
	return f.Type == rsocket.TypeError && f.StreamID == 0 && f.Code == rsocket.CodeRejectedSetup &&
		strings.HasPrefix(string(f.Data), "[PSYNC_S2304] ")
}
