package clienttest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/stages/checksum"
)

// These tests check the harness itself against a hand-written sync stream
// (no PostgreSQL, no syncpipe): the real SDK accepts a correct stream, and
// a wrong bucket checksum makes the driver report an error. Without the
// second, TestRealClient could not tell "checksums validated" from
// "checksum failures not noticed".

type fakeOp struct{ typ, id, data string }

// fakeServer serves one checkpoint of ops in bucket "global[]" with the
// given checksum adjustment (0 = correct), then holds the stream open.
func fakeServer(t *testing.T, ops []fakeOp, skew uint32) (endpoint string, requests chan http.Header) {
	t.Helper()
	requests = make(chan http.Header, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sync/stream", func(w http.ResponseWriter, r *http.Request) {
		requests <- r.Header.Clone()
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var sum uint32
		var data []map[string]any
		for i, op := range ops {
			c := checksum.Put(op.typ, op.id, []byte(op.data))
			sum += c
			data = append(data, map[string]any{"op_id": fmt.Sprint(i + 1), "op": "PUT", "object_type": op.typ,
				"object_id": op.id, "subkey": "s" + op.id, "data": op.data, "checksum": c})
		}
		last := fmt.Sprint(len(ops))
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		_ = enc.Encode(map[string]any{"checkpoint": map[string]any{"last_op_id": last, "buckets": []any{
			map[string]any{"bucket": "global[]", "checksum": int32(sum + skew), "count": len(ops), "priority": 3}}}})
		_ = enc.Encode(map[string]any{"data": map[string]any{"bucket": "global[]", "after": "0", "next_after": last,
			"has_more": false, "data": data}})
		_ = enc.Encode(map[string]any{"checkpoint_complete": map[string]any{"last_op_id": last}})
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
		}
	})
	mux.HandleFunc("GET /write-checkpoint2.json", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"data":{"write_checkpoint":"1"}}`)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), requests
}

func fakeOps() []fakeOp {
	return []fakeOp{
		{"lists", "l1", `{"name":"List 1","owner_id":"u1"}`},
		{"lists", "l2", `{"name":"List 2","owner_id":"u1"}`},
		{"todos", "t1", `{"list_id":"l1","description":"buy milk","completed":0,"created_at":"2026-01-01 09:00:00Z"}`},
	}
}

func TestFakeStreamSyncs(t *testing.T) {
	t.Parallel()
	endpoint, requests := fakeServer(t, fakeOps(), 0)
	c := startClient(t, endpoint, "fake-token", "--lists", "2", "--todos", "1")
	ev := c.expect("first_sync", 2*time.Minute)
	if *ev.Lists != 2 || *ev.Todos != 1 {
		t.Fatalf("first sync %s, want 2 lists and 1 todo", ev.raw)
	}
	h := <-requests
	if got := h.Get("Authorization"); got != "Token fake-token" {
		t.Errorf("Authorization %q, want %q", got, "Token fake-token")
	}
	if !strings.Contains(h.Get("Accept"), "application/x-ndjson") {
		t.Errorf("Accept %q does not offer NDJSON", h.Get("Accept"))
	}
	c.send(map[string]any{"cmd": "query", "sql": "SELECT id, description, completed FROM todos"})
	rows := c.expect("rows", time.Minute).Rows
	if len(rows) != 1 || rows[0]["description"] != "buy milk" || rows[0]["completed"] != float64(0) {
		t.Fatalf("todos %v", rows)
	}
	c.exit()
}

func TestFakeChecksumMismatchIsReported(t *testing.T) {
	t.Parallel()
	endpoint, _ := fakeServer(t, fakeOps(), 1)
	c := startClient(t, endpoint, "fake-token")
	select {
	case ev, ok := <-c.events:
		if !ok {
			t.Fatal("client exited without an event")
		}
		if ev.Event != "error" || !strings.Contains(strings.ToLower(ev.Message), "checksum") {
			t.Fatalf("got %s, want an error event about checksums", ev.raw)
		}
		t.Logf("reported: %s", ev.Message)
	case <-time.After(2 * time.Minute):
		t.Fatal("no error event for a wrong checksum")
	}
	<-c.exited
	if c.waitErr == nil {
		t.Fatal("client exited 0 after a checksum failure")
	}
}
