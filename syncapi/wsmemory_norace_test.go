//go:build !race

package syncapi

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestWebSocketSlowReaderMemory: WebSocket clients that requested three
// lines (token_expires_in, the checkpoint, one data line) and then stop
// asking hold their streams waiting for credit, not the checkpoint in the
// server's memory: with a checkpoint of some 20 MB pending, each holds
// about the one storage batch its line in hand came from (at most
// maxBatchBytes of encoded ops, 1 MiB; measured ~0.7 MiB, the test's own
// client connections included), whatever the checkpoint's size — nothing
// is read ahead of that line. (Without the race detector, which
// multiplies every allocation.)
func TestWebSocketSlowReaderMemory(t *testing.T) {
	const (
		rows    = 40000 // of about 500 bytes: ~20 MB of ops in one bucket
		clients = 20
	)
	e := newFakeEnv(t, memRules, memTables, func(c *Config) { c.MaxConcurrentConnections = clients })
	var cs []model.Change
	for i := range rows {
		cs = append(cs, e.upsert("settings", fmt.Sprintf("s%05d", i), strings.Repeat("setting ", 60)))
	}
	e.commit(cs...)
	waiting := make(chan struct{}, 4*clients)
	e.srv.waitCredit = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	tok := token(t, "u0000", nil)
	before := liveHeap()
	var cs2 []*wsClient
	for range clients {
		c := dialWS(t, e.http.URL)
		c.open(tok, 3, nil)
		for i := range 3 {
			if l, _ := c.next(); i == 2 && l.Data == nil {
				t.Fatalf("third line %.100s, want data", l.Raw)
			}
		}
		cs2 = append(cs2, c)
	}
	for range clients { // every stream waits with its fourth line
		waitSignal(t, waiting)
	}
	per := (int64(liveHeap()) - int64(before)) / clients
	t.Logf("live heap per stalled WebSocket stream: %d KiB (checkpoint ~%d MiB)", per>>10, rows*500>>20)
	if per > maxBatchBytes+maxBatchBytes/4 {
		t.Errorf("%d KiB of live heap per stalled stream, want about a batch (%d KiB) at most", per>>10, maxBatchBytes>>10)
	}
	runtime.KeepAlive(cs2)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestIdleWebSocketMemory measures what an idle WebSocket stream (first
// sync done, 50 buckets, waiting for the next checkpoint) adds to the
// process, the test's own client connection included, and holds it to
// the HTTP streams' bar (idleStreamBound, issue 17) plus that client's
// share (its read and write buffers): the transport must not make the
// Load scenario's thousand connections cost more.
func TestIdleWebSocketMemory(t *testing.T) {
	const (
		n    = 100
		warm = 5
	)
	if os.Getenv("SYNCAPI_HEAP_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	e := memEnv(t, n+warm, 10)
	for u := range warm {
		c := dialWS(t, e.http.URL)
		c.open(token(t, memUser(u), nil), 10, nil)
		c.untilComplete()
	}
	before := measureLive()
	cs := make([]*wsClient, 0, n)
	for u := warm; u < warm+n; u++ {
		c := dialWS(t, e.http.URL)
		c.open(token(t, memUser(u), nil), 10, nil)
		c.untilComplete()
		cs = append(cs, c)
	}
	per := perStream(before, measureLive(), n)
	if profile := os.Getenv("SYNCAPI_HEAP_PROFILE"); profile != "" {
		writeHeapProfile(t, profile)
	}
	t.Logf("%d idle WebSocket streams of %d buckets: %s per stream, the test's client included", n, memLists+1, per)
	const clientShare = 16 << 10
	if per.total() > idleStreamBound+clientShare {
		t.Errorf("%s per idle WebSocket stream, want < %d", per, idleStreamBound+clientShare)
	}
	runtime.KeepAlive(cs)
}
