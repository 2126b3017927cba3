package syncapi

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestWebSocketDeflate: a client that offers per-message deflate (as
// @powersync/node's does) gets it, and the same lines as one that does
// not; the sent-bytes metric counts what each connection wrote (frames
// included), under content_encoding deflate and identity, and the
// compressed stream is the smaller.
func TestWebSocketDeflate(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	})
	todoChanges(e, 400) // data lines well over the 1 KB threshold
	tok := token(t, "u1", nil)

	plain, plainHdr := dialWSWith(t, e.http.URL, nil)
	plain.open(tok, 1000, nil)
	plainLines := plain.untilComplete()
	bytesPlain := sentBytes(t, reader)
	packed, packedHdr := dialWSWith(t, e.http.URL, &websocket.DialOptions{CompressionMode: websocket.CompressionNoContextTakeover})
	packed.open(tok, 1000, nil)
	packedLines := packed.untilComplete()
	bytesAll := sentBytes(t, reader)

	if h := plainHdr.Get("Sec-WebSocket-Extensions"); h != "" {
		t.Errorf("a client offering nothing got extensions %q", h)
	}
	if h := packedHdr.Get("Sec-WebSocket-Extensions"); !strings.Contains(h, "permessage-deflate") || !strings.Contains(h, "server_no_context_takeover") {
		t.Errorf("a client offering deflate got extensions %q, want permessage-deflate without server context takeover", h)
	}
	if got, want := normalized(t, packedLines), normalized(t, plainLines); !slices.Equal(got, want) {
		t.Fatalf("compressed stream's lines\n%s\nwant the plain one's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	identity, deflate := bytesPlain[codingIdentity], bytesAll[codingDeflate]
	t.Logf("%d lines: %d bytes on the wire uncompressed, %d with deflate", len(plainLines), identity, deflate)
	if identity <= 0 || bytesAll[codingIdentity] != identity {
		t.Errorf("identity stream counted %d bytes, then %d; want its frames' once", identity, bytesAll[codingIdentity])
	}
	if deflate <= 0 || deflate > identity*2/3 {
		t.Errorf("deflate stream counted %d bytes against %d uncompressed, want under two thirds", deflate, identity)
	}
}

// sentBytes is syncpipe_sync_sent_bytes of the WebSocket transport by
// content_encoding.
func sentBytes(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "syncpipe_sync_sent_bytes" {
				continue
			}
			for _, p := range sum.DataPoints {
				if tr, _ := p.Attributes.Value("transport"); tr.AsString() != transportWebSocket {
					continue
				}
				enc, _ := p.Attributes.Value("content_encoding")
				out[enc.AsString()] += p.Value
			}
		}
	}
	return out
}
