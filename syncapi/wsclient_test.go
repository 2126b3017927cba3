package syncapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/syncpipe/syncpipe/internal/testkit/rsocketclient"
	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// wsClient speaks RSocket over a real WebSocket (coder/websocket's
// client) as PowerSync's JS client does (rsocket/doc.go), its frames
// written by internal/testkit/rsocketclient: the rsocket package has no
// client appenders outside its tests.
type wsClient struct {
	t   testing.TB
	ws  *websocket.Conn
	ctx context.Context
}

// dialWS opens a WebSocket to the env's GET /sync/stream.
func dialWS(t testing.TB, httpURL string) *wsClient {
	t.Helper()
	c, _ := dialWSWith(t, httpURL, nil)
	return c
}

// dialWSWith is dialWS with opts (say, compression offered); it also
// returns the upgrade response's header.
func dialWSWith(t testing.TB, httpURL string, opts *websocket.DialOptions) (*wsClient, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(httpURL, "http")+"/sync/stream", opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	ws.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &wsClient{t: t, ws: ws, ctx: ctx}, resp.Header
}

// The client's frames, as the JS client sends them.

// header starts a frame by hand (for malformed ones).
func header(id uint32, typ rsocket.Type, flags rsocket.Flags) []byte {
	return rsocketclient.Header(id, typ, flags)
}

// setupFrame is the JS client's SETUP for tok.
func setupFrame(tok string, keepaliveMS, lifetimeMS uint32) []byte {
	meta, _ := json.Marshal(map[string]string{"token": "Token " + tok, "user_agent": "syncapi-test/1"})
	return rsocketclient.Setup(meta, keepaliveMS, lifetimeMS)
}

// requestStreamFrame is the JS client's REQUEST_STREAM on stream 1
// (raw_data true unless body sets it).
func requestStreamFrame(t testing.TB, n uint32, body map[string]any) []byte {
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["raw_data"]; !ok {
		body["raw_data"] = true
	}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return rsocketclient.RequestStream(1, n, data)
}

func requestNFrame(n uint32) []byte { return rsocketclient.RequestN(1, n) }

func cancelFrame() []byte { return rsocketclient.Cancel(1) }

func keepaliveFrame(data string) []byte { return rsocketclient.Keepalive(data) }

// send writes one frame.
func (c *wsClient) send(frame []byte) {
	c.t.Helper()
	if err := c.ws.Write(c.ctx, websocket.MessageBinary, frame); err != nil {
		c.t.Fatalf("send frame: %v", err)
	}
}

// open sends the SETUP (20 s keepalive, 90 s lifetime) and the
// REQUEST_STREAM asking for n lines.
func (c *wsClient) open(tok string, n uint32, body map[string]any) {
	c.t.Helper()
	c.send(setupFrame(tok, 20000, 90000))
	c.send(requestStreamFrame(c.t, n, body))
}

// frame reads the next frame; err is the connection's end.
func (c *wsClient) frame() (rsocket.Frame, error) {
	typ, b, err := c.ws.Read(c.ctx)
	if err != nil {
		return rsocket.Frame{}, err
	}
	if typ != websocket.MessageBinary {
		c.t.Fatalf("a %v message", typ)
	}
	f, err := rsocket.Parse(b)
	if err != nil {
		c.t.Fatalf("server frame %x: %v", b, err)
	}
	return f, nil
}

// next reads the next sync line: a PAYLOAD with NEXT whose data is one
// BSON document, decoded like the HTTP tests' BSON lines. ok is false at
// COMPLETE; an ERROR or the connection's end fails the test.
func (c *wsClient) next() (line, bool) {
	c.t.Helper()
	for {
		f, err := c.frame()
		if err != nil {
			c.t.Fatalf("connection ended: %v", err)
		}
		switch {
		case f.Type == rsocket.TypeKeepalive:
			continue
		case f.Type == rsocket.TypePayload && f.Flags&rsocket.FlagNext != 0:
			if f.Flags&rsocket.FlagComplete != 0 {
				c.t.Fatalf("a line with COMPLETE: the end is sent alone")
			}
			return decodeBSONLine(c.t, f.Data), true
		case f.Type == rsocket.TypePayload && f.Flags&rsocket.FlagComplete != 0:
			return line{}, false
		}
		c.t.Fatalf("frame %v on stream %d (code %v, %q), want a PAYLOAD", f.Type, f.StreamID, f.Code, f.Data)
	}
}

// decodeBSONLine parses a BSON line as the HTTP tests do.
func decodeBSONLine(t testing.TB, doc []byte) line {
	t.Helper()
	js, err := bson.MarshalExtJSON(bson.Raw(doc), false, false)
	if err != nil {
		t.Fatalf("BSON line %x: %v", doc, err)
	}
	var l line
	if err := json.NewDecoder(bytes.NewReader(js)).Decode(&l); err != nil {
		t.Fatalf("line %s: %v", js, err)
	}
	l.Raw = string(js)
	return l
}

// untilComplete reads lines (token_expires_in dropped) up to the next
// checkpoint_complete, with credit for each line read.
func (c *wsClient) untilComplete() []line {
	c.t.Helper()
	var out []line
	for {
		l, ok := c.next()
		if !ok {
			c.t.Fatalf("stream completed; lines so far: %v", kinds(out))
		}
		c.send(requestNFrame(1))
		if l.TokenExpiresIn != nil {
			continue
		}
		out = append(out, l)
		if l.CheckpointComplete != nil {
			return out
		}
	}
}

// refused reads up to an ERROR frame and returns it, then expects the
// connection to close with a close frame (not dropped).
func (c *wsClient) refused() rsocket.Frame {
	c.t.Helper()
	for {
		f, err := c.frame()
		if err != nil {
			c.t.Fatalf("connection ended without an ERROR frame: %v", err)
		}
		if f.Type == rsocket.TypeError {
			c.closed()
			return f
		}
	}
}

// closed expects the connection to end with a WebSocket close frame and
// returns its code.
func (c *wsClient) closed() websocket.StatusCode {
	c.t.Helper()
	for {
		f, err := c.frame()
		if err == nil {
			if f.Type != rsocket.TypeKeepalive {
				c.t.Fatalf("a %v frame (stream %d, %q) before the close", f.Type, f.StreamID, f.Data)
			}
			continue
		}
		code := websocket.CloseStatus(err)
		if code == -1 {
			c.t.Fatalf("connection dropped without a close frame: %v", err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			c.t.Fatal("timed out waiting for the close")
		}
		return code
	}
}
