package syncapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// The memory measurements of issue 17 ("memory per open stream is
// bounded"): streams that finished their first sync and wait for the next
// checkpoint are what a server holds by the thousand, so their cost is
// what must stay small.

// memRules give each user one global bucket and one bucket per list they
// own: with memLists lists a user's stream has memLists+1 buckets.
const memRules = `
bucket_definitions:
  global:
    data:
      - SELECT id, name FROM settings
  by_list:
    parameters: SELECT id AS list_id FROM lists WHERE owner_id = request.user_id()
    data:
      - SELECT id, list_id, description FROM todos WHERE list_id = bucket.list_id
`

var memTables = map[string][]string{
	"settings": {"id", "name"},
	"lists":    {"id", "name", "owner_id"},
	"todos":    {"id", "list_id", "description"},
}

// The shape of the measured data: per user, memLists lists of memTodos
// todos; a global bucket of memSettings rows of about 500 bytes (some
// 1.2 MB encoded, so a first sync fills a whole data batch).
const (
	memLists    = 49
	memTodos    = 4
	memSettings = 2000
)

// memEnv is a fake-storage server holding the data of users u0000 to
// u(owners-1), published, that takes that many streams more: the streams
// of other users, who own no list, have the global bucket only.
func memEnv(t *testing.T, owners, streams int) *fakeEnv {
	t.Helper()
	e := newFakeEnv(t, memRules, memTables, func(c *Config) { c.MaxConcurrentConnections = owners + streams })
	var cs []model.Change
	for i := range memSettings {
		cs = append(cs, e.upsert("settings", fmt.Sprintf("s%04d", i), strings.Repeat("setting ", 60)))
	}
	for u := range owners {
		for l := range memLists {
			list := fmt.Sprintf("l%04d-%02d", u, l)
			cs = append(cs, e.upsert("lists", list, "a list", memUser(u)))
			for i := range memTodos {
				cs = append(cs, e.upsert("todos", fmt.Sprintf("%s-%d", list, i), list, "a todo description of about sixty characters, like the bench"))
			}
		}
	}
	e.commit(cs...)
	return e
}

func memUser(u int) string { return fmt.Sprintf("u%04d", u) }

// openIdle opens a stream for user as a bare HTTP/1.1 client, reads it up
// to its first checkpoint_complete and returns the connection, which the
// caller keeps open without reading: an idle client. Nothing of the
// client but the connection stays reachable, so a heap measurement sees
// the server's share.
func openIdle(t testing.TB, addr, tok string, gz bool) net.Conn {
	t.Helper()
	c := dial(t, addr)
	postRawData(t, c, tok, gz)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("sync stream: HTTP %d: %s", resp.StatusCode, b)
	}
	var r io.Reader = resp.Body
	if gz {
		if r, err = gzip.NewReader(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	readToComplete(t, bufio.NewReaderSize(r, 64<<10))
	return c
}

// readToComplete reads lines up to the first checkpoint_complete.
func readToComplete(t testing.TB, r *bufio.Reader) {
	t.Helper()
	for {
		l, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			t.Fatalf("stream ended before checkpoint_complete: %v", err)
		}
		if bytes.HasPrefix(l, []byte(`{"error"`)) {
			t.Fatalf("stream error: %s", l)
		}
		if bytes.HasPrefix(l, []byte(`{"checkpoint_complete"`)) {
			return
		}
	}
}

// liveMem is the heap in use by reachable objects and the goroutine
// stacks, after collecting garbage: what streams hold, apart from the
// runtime's free lists and the kernel's socket buffers.
type liveMem struct{ heap, stack float64 }

// measureLive collects garbage a few times first: what finalizers
// released goes at the second, and each one halves an oversized stack
// at most once, as the runtime does over time for idle goroutines.
func measureLive() liveMem {
	for range 4 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return liveMem{heap: float64(ms.HeapAlloc), stack: float64(ms.StackInuse)}
}

// perStream is the memory added from m0 to m1 by n streams, per stream.
func perStream(m0, m1 liveMem, n int) liveMem {
	return liveMem{heap: (m1.heap - m0.heap) / float64(n), stack: (m1.stack - m0.stack) / float64(n)}
}

func (m liveMem) total() float64 { return m.heap + m.stack }

func (m liveMem) String() string {
	return fmt.Sprintf("%.0f bytes (heap %.0f, stacks %.0f)", m.total(), m.heap, m.stack)
}

// streamCost opens n idle streams, of users u0005 on, after five that
// take the one-time costs (parsed rules, pools, the HTTP server's own),
// and returns what they added, per stream. With SYNCAPI_HEAP_PROFILE set
// it writes a heap profile there, sampling every allocation, while they
// are open.
func streamCost(t *testing.T, e *fakeEnv, n int, gz bool) liveMem {
	t.Helper()
	profile := os.Getenv("SYNCAPI_HEAP_PROFILE")
	if profile != "" {
		runtime.MemProfileRate = 1
	}
	addr := e.http.Listener.Addr().String()
	const warm = 5
	for u := range warm {
		openIdle(t, addr, token(t, memUser(u), nil), gz)
	}
	before := measureLive()
	conns := make([]net.Conn, 0, n)
	for u := warm; u < warm+n; u++ {
		conns = append(conns, openIdle(t, addr, token(t, memUser(u), nil), gz))
	}
	after := measureLive()
	if profile != "" {
		writeHeapProfile(t, profile)
	}
	runtime.KeepAlive(conns)
	return perStream(before, after, n)
}

func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}
