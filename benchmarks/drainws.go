package benchmarks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/syncpipe/syncpipe/internal/testkit/rsocketclient"
	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// drainCredit is the lines the WebSocket drain keeps requested, as the
// JS SDK does (10, one more asked for each line it handles).
const drainCredit = 10

// drainWS is drain over the WebSocket transport, as an SDK with
// connectionMethod 'web-socket': SETUP with the token, REQUEST_STREAM
// with the sync request, then each line a BSON PAYLOAD, answered with
// REQUEST_N 1; with deflate, per-message deflate offered, as
// @powersync/node's WebSocket offers it. st.wire counts the bytes read
// off the connection (WebSocket framing and compression included),
// st.bytes the lines.
func drainWS(ctx context.Context, url, token string, deflate, checkpointOnly bool) (st drainStats, err error) {
	start := time.Now()
	var wire atomic.Int64
	opts := &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &readCounter{Conn: c, n: &wire}, nil
		}}}}
	if deflate {
		opts.CompressionMode = websocket.CompressionNoContextTakeover
	}
	defer func() { st.wire = wire.Load() }() // every return: st is the named result
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/sync/stream", opts)
	if err != nil {
		return st, fmt.Errorf("sync websocket: %w", err)
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	defer func() { _ = ws.CloseNow() }()
	ws.SetReadLimit(64 << 20)
	meta, err := json.Marshal(map[string]string{"token": "Token " + token, "user_agent": "syncpipe-drain-bench"})
	if err != nil {
		return st, fmt.Errorf("setup metadata: %w", err)
	}
	for _, f := range [][]byte{rsocketclient.Setup(meta, 20000, 90000), rsocketclient.RequestStream(1, drainCredit, []byte(drainRequest))} {
		if err := ws.Write(ctx, websocket.MessageBinary, f); err != nil {
			return st, fmt.Errorf("sync websocket: send: %w", err)
		}
	}
	more := rsocketclient.RequestN(1, 1)
	want := int64(-1)
	for {
		_, msg, err := ws.Read(ctx)
		st.total = time.Since(start)
		if err != nil {
			return st, fmt.Errorf("read sync websocket after %d ops: %w", st.ops, err)
		}
		f, err := rsocket.Parse(msg)
		if err != nil && !errors.Is(err, rsocket.ErrIgnored) {
			return st, fmt.Errorf("sync websocket: %w", err)
		}
		switch {
		case f.Type == rsocket.TypeError:
			return st, fmt.Errorf("sync websocket: ERROR %v: %s", f.Code, f.Data)
		case f.Type != rsocket.TypePayload:
			continue // a KEEPALIVE, say
		case f.Flags&rsocket.FlagNext == 0:
			return st, fmt.Errorf("sync websocket: the stream completed after %d ops, before checkpoint_complete", st.ops)
		}
		st.bytes += int64(len(f.Data))
		if done, err := bsonLine(f.Data, &st, &want, checkpointOnly); done || err != nil {
			return st, err
		}
		if err := ws.Write(ctx, websocket.MessageBinary, more); err != nil {
			return st, fmt.Errorf("sync websocket: REQUEST_N: %w", err)
		}
	}
}

// readCounter counts the bytes read from a connection.
type readCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}
