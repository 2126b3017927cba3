package benchmarks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/syncpipe/syncpipe/internal/testkit/rsocketclient"
	"github.com/syncpipe/syncpipe/syncapi/rsocket"
)

// loadBSONLine is the part of a BSON sync line a load client reads.
type loadBSONLine struct {
	Data               *loadBucketData `bson:"data"`
	CheckpointComplete *struct {
		LastOpID string `bson:"last_op_id"`
	} `bson:"checkpoint_complete"`
	Error bson.Raw `bson:"error"`
}

// streamWS follows c's stream over the WebSocket transport, as an SDK
// with connectionMethod 'web-socket' does: SETUP with the token,
// REQUEST_STREAM with the sync request and 10 lines requested, one more
// (REQUEST_N 1) for each line handled; each line a BSON PAYLOAD, decoded
// straight from BSON; per-message deflate offered, as @powersync/node's
// WebSocket offers it. Like the SDK it sends a KEEPALIVE every
// loadKeepalive: the server closes a connection silent for the lifetime
// SETUP gave (loadLifetime), and a load run outlasts it.
func (lc *loadClients) streamWS(ctx context.Context, url string, c *loadClient) error {
	tok, err := p5Token(c.user)
	if err != nil {
		return err
	}
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/sync/stream",
		&websocket.DialOptions{CompressionMode: websocket.CompressionNoContextTakeover})
	if err != nil {
		return fmt.Errorf("sync websocket: %w", err)
	}
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	defer func() { _ = ws.CloseNow() }()
	ws.SetReadLimit(64 << 20)
	meta, err := json.Marshal(map[string]string{"token": "Token " + tok, "user_agent": "syncpipe-load-bench"})
	if err != nil {
		return fmt.Errorf("setup metadata: %w", err)
	}
	req, err := json.Marshal(map[string]any{"raw_data": true, "client_id": c.user, "buckets": []any{}})
	if err != nil {
		return fmt.Errorf("sync request: %w", err)
	}
	setup := rsocketclient.Setup(meta, uint32(loadKeepalive.Milliseconds()), uint32(loadLifetime.Milliseconds()))
	for _, f := range [][]byte{setup, rsocketclient.RequestStream(1, drainCredit, req)} {
		if err := ws.Write(ctx, websocket.MessageBinary, f); err != nil {
			return fmt.Errorf("sync websocket: send: %w", err)
		}
	}
	kctx, stopKeepalive := context.WithCancel(ctx)
	defer stopKeepalive()
	go keepAlive(kctx, ws)
	more := rsocketclient.RequestN(1, 1)
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("read the stream: %w", err)
		}
		now := time.Now()
		f, err := rsocket.Parse(msg)
		if err != nil && !errors.Is(err, rsocket.ErrIgnored) {
			return fmt.Errorf("sync websocket: %w", err)
		}
		switch {
		case f.Type == rsocket.TypeError:
			return fmt.Errorf("stream error: ERROR %v: %s", f.Code, f.Data)
		case f.Type != rsocket.TypePayload:
			continue // a KEEPALIVE answer, say
		case f.Flags&rsocket.FlagNext == 0:
			return errors.New("the stream completed")
		}
		var l loadBSONLine
		if err := bson.Unmarshal(f.Data, &l); err != nil {
			return fmt.Errorf("bad BSON line: %w", err)
		}
		switch {
		case l.Error != nil:
			return fmt.Errorf("stream error: %s", l.Error)
		case l.Data != nil:
			if err := c.apply(loadLine{Data: l.Data}); err != nil {
				return err
			}
		case l.CheckpointComplete != nil:
			op, err := strconv.ParseInt(l.CheckpointComplete.LastOpID, 10, 64)
			if err != nil {
				return fmt.Errorf("checkpoint_complete last_op_id %q: %w", l.CheckpointComplete.LastOpID, err)
			}
			if c.complete(op, now) {
				lc.synced.Add(1)
			}
		}
		if err := ws.Write(ctx, websocket.MessageBinary, more); err != nil {
			return fmt.Errorf("sync websocket: REQUEST_N: %w", err)
		}
	}
}

// The keepalive interval and lifetime the load clients give in SETUP: the
// JavaScript SDK's (20 s, 90 s).
const (
	loadKeepalive = 20 * time.Second
	loadLifetime  = 90 * time.Second
)

// keepAlive sends a KEEPALIVE every loadKeepalive until ctx ends (the
// stream's end; a failed write ends the stream's read too, so it stops
// there). A websocket.Conn takes writes from several goroutines.
func keepAlive(ctx context.Context, ws *websocket.Conn) {
	t := time.NewTicker(loadKeepalive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := ws.Write(ctx, websocket.MessageBinary, rsocketclient.Keepalive("")); err != nil {
				return
			}
		}
	}
}
