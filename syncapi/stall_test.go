package syncapi

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/logbuf"
	"github.com/syncpipe/syncpipe/model"
)

// The stalled client's data: more than the socket buffers on both sides
// of a loopback connection take (a few MB), as random hex so that gzip
// cannot shrink it below that.
const (
	stallRows     = 1000
	stallRowBytes = 16 << 10
)

// TestStalledReaderDropped: a client that sends its request and then
// reads nothing has its stream dropped once a write has waited for the
// write deadline (Config.WriteTimeout, shortened here): the handler
// returns and frees its slot, and the stream's buffers are released (the
// live heap is back to what it was before the stream). Not parallel: the
// live heap is measured.
func TestStalledReaderDropped(t *testing.T) {
	const deadline = time.Second
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "identity", true: "gzip"}[gz], func(t *testing.T) {
			testStalledReader(t, deadline, gz)
		})
	}
}

func testStalledReader(t *testing.T, deadline time.Duration, gz bool) {
	var logs logbuf.Buffer
	e := newFakeEnv(t, memRules, memTables, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.WriteTimeout = deadline
	})
	rng := rand.New(rand.NewPCG(17, 17))
	var cs []model.Change
	for i := range stallRows {
		b := make([]byte, stallRowBytes/2)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		cs = append(cs, e.upsert("settings", fmt.Sprintf("s%04d", i), hex.EncodeToString(b)))
	}
	e.commit(cs...)
	ended := make(chan struct{}, 1)
	e.srv.streamDone = func() { ended <- struct{}{} }
	var lines atomic.Int64
	e.srv.afterDataLine = func() { lines.Add(1) }
	addr := e.http.Listener.Addr().String()
	tok := token(t, "u1", nil)

	before := measureLive()
	c := stalledRequest(t, addr, tok, gz)
	start := time.Now()
	waitSignal(t, ended)
	// How many data lines the socket buffers took varies (0 to 7 seen):
	// what matters is that a write failed, and not before the deadline.
	took := time.Since(start)
	if log := logs.String(); !strings.Contains(log, "sync stream ended: client unreachable") ||
		!strings.Contains(log, os.ErrDeadlineExceeded.Error()) || took < deadline {
		t.Fatalf("stream ended after %s, want a write that failed after the %s deadline; log:\n%s", took, deadline, logs.String())
	}
	t.Logf("stalled stream dropped after %d data lines, %s", lines.Load(), took.Round(time.Millisecond))
	if n := e.srv.active.Load(); n != 0 {
		t.Fatalf("%d streams still counted open", n)
	}
	// A data batch is about maxBatchBytes: the dropped stream holds none.
	if grew := measureLive().heap - before.heap; grew > maxBatchBytes/4 {
		t.Errorf("live heap %.0f bytes above its level before the stalled stream, want < %d", grew, maxBatchBytes/4)
	}
	_ = c.Close()
}

// stalledRequest sends a sync request and never reads the answer; its
// receive buffer is made small, so the server's writes block soon.
func stalledRequest(t *testing.T, addr, tok string, gz bool) net.Conn {
	t.Helper()
	c := dial(t, addr)
	if err := c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	postRawData(t, c, tok, gz)
	return c
}
