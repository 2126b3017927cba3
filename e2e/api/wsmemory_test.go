package api

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/rsocketclient"
)

// oneBucketRules put every row of items in one global bucket.
const oneBucketRules = `bucket_definitions:
  global:
    data:
      - SELECT * FROM items
`

// rss is a process's resident set from /proc/<pid>/status, in bytes:
// VmRSS, and its anonymous (heap, stacks) and file-backed (the binary's
// pages) parts.
type rss struct{ total, anon, file int64 }

func (r rss) String() string {
	return fmt.Sprintf("%.2f MiB (anon %.2f, file %.2f)", mib(r.total), mib(r.anon), mib(r.file))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// readRSS reads pid's resident set.
func readRSS(t testing.TB, pid int) rss {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read the child's RSS: %v", err)
	}
	defer f.Close()
	var r rss
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			r.total = kb << 10
		case "RssAnon":
			r.anon = kb << 10
		case "RssFile":
			r.file = kb << 10
		}
	}
	if r.total == 0 {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	return r
}

// TestWebSocketSlowClientRSS is the issue's acceptance, as stated: "A
// client that requests N=1 and then reads one line a second does not
// grow the server's RSS by more than 1 MB while a 1M-op checkpoint is
// pending." A million small rows go into one bucket; once the snapshot's
// checkpoint is published and the process's RSS has settled, one client
// opens a stream with REQUEST_STREAM n=1 and takes one line a second,
// each with a REQUEST_N 1, for ten lines; the server's RSS, sampled each
// second, stays within 1 MiB of where it was.
//
// The child is syncpipe built without -race (harness.PlainBinary), and
// the server has served the same stream once before the baseline (a
// warm-up client): the measure is the product's memory for the
// connection, not the race detector's shadow memory nor the binary's
// code paged in on first use. Measured (2-core machine, loaded): growth
// 380–780 KiB, most of it the storage batch in hand (~190 KiB of BSON
// for 1000 small ops) and garbage not yet collected; the snapshot of
// the million rows takes 6–14 s, the test 25–35 s. The bar holds for
// small rows: with rows of ~1 KB a storage read is its byte cap
// (syncapi's maxBatchBytes, 1 MiB), and the same client grew the RSS by
// up to 2.5 MiB (100k such rows).
func TestWebSocketSlowClientRSS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		rows      = 1_000_000
		slowLines = 10 // read a second apart
	)
	e := harness.New(t, harness.Options{Rules: oneBucketRules})
	began := time.Now()
	e.Exec(ctx, `CREATE TABLE items (id int PRIMARY KEY)`)
	e.Exec(ctx, fmt.Sprintf(`INSERT INTO items SELECT i FROM generate_series(1, %d) i`, rows))
	loaded := time.Now()
	// The product's RSS, not the race detector's (see PlainBinary). With
	// madvdontneed=0 the memory the runtime's scavenger hands back stays
	// in RSS until the kernel needs it, so RSS follows the heap's
	// high-water mark: otherwise a scavenge between the warm-up and the
	// slow client (timing, not the client) made its pages count again as
	// growth — 1.2 and 2.0 MiB in 2 of 5 runs, against 0.1–0.4 MiB with
	// it. A server that holds the pending checkpoint for the client still
	// grows by the checkpoint (a Write that queued lines past the credit:
	// +161 MiB by line 3).
	p := e.StartWith(harness.ProcConfig{Binary: harness.PlainBinary(t), Env: []string{"GODEBUG=madvdontneed=0"}})
	e.WaitCaughtUp(ctx)
	t.Logf("source loaded in %s, snapshot of %d rows published in %s", loaded.Sub(began).Round(time.Millisecond), rows, time.Since(loaded).Round(time.Millisecond))
	tok := e.Token("u1")

	// A server that has served a WebSocket stream before: the code of the
	// path is paged in (RssFile grew by ~0.6 MiB the first time), which
	// is the binary's, not the connection's. The same lines as the slow
	// client's, at once.
	warm := dialWS(t, ctx, e.API)
	warm.open(ctx, tok, 1, 20000, 90000)
	for range slowLines {
		warm.line(ctx)
		warm.send(ctx, rsocketclient.RequestN(1, 1))
	}
	warm.send(ctx, rsocketclient.Cancel(1))
	warm.pong(ctx, "cancelled")
	_ = warm.ws.Close(websocket.StatusNormalClosure, "")

	// Settled: the least of a few samples, a second apart.
	base := readRSS(t, p.Pid())
	for range 3 {
		time.Sleep(time.Second)
		if r := readRSS(t, p.Pid()); r.total < base.total {
			base = r
		}
	}
	t.Logf("server RSS before the client: %s", base)

	c := dialWS(t, ctx, e.API)
	c.open(ctx, tok, 1, 20000, 90000)
	peak := base
	var kinds []string
	for i := range slowLines {
		kind, size := c.line(ctx)
		if kind == "checkpoint_complete" {
			t.Fatalf("line %d completed the checkpoint: it was to stay pending", i+1)
		}
		kinds = append(kinds, fmt.Sprintf("%s(%d B)", kind, size))
		time.Sleep(time.Second) // the client's pace: the test's subject
		r := readRSS(t, p.Pid())
		t.Logf("line %d %s: server RSS %s, %+.0f KiB", i+1, kinds[i], r, float64(r.total-base.total)/1024)
		if r.total > peak.total {
			peak = r
		}
		c.send(ctx, rsocketclient.RequestN(1, 1))
	}
	growth := peak.total - base.total
	t.Logf("lines %v; server RSS peak %s, growth %.0f KiB", kinds, peak, float64(growth)/1024)
	if growth > 1<<20 {
		t.Errorf("server RSS grew by %.2f MiB (from %s to %s) for one slow WebSocket client, want ≤ 1 MiB", mib(growth), base, peak)
	}
}
