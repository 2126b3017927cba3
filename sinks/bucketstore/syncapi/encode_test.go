package syncapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", `q"uote`, `back\\slash`, "nl\n tab\t cr\r", "\x00\x01\x1f\x7f",
		"ünïcödé ✓ 😀", "bad \xff utf8 \xe2\x82", "<html> & \u2028", `1#by_list["a"]`} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q → %s: not JSON: %v", s, got, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("%q → %s → %q, want %q", s, got, back, want)
		}
		if b := appendJSONString(nil, []byte(s)); string(b) != string(got) {
			t.Errorf("[]byte %q → %s, string → %s", s, b, got)
		}
	}
}

func TestAppendOpAllocations(t *testing.T) {
	row := &bucketstore.OpRow{Bucket: "1#global[]", OpID: 42, Op: bucketstore.OpPut, ObjectType: "lists",
		ObjectID: "a", Subkey: "t/u", Data: []byte(`{"id":"a","name":"x"}`), Checksum: 4000000000}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendOp(buf[:0], row, true) }); n != 0 {
		t.Fatalf("appendOp allocates %v times per op", n)
	}
	var op map[string]any
	if err := json.Unmarshal(buf, &op); err != nil {
		t.Fatal(err)
	}
	if op["op_id"] != "42" || op["op"] != "PUT" || op["data"] != `{"id":"a","name":"x"}` || op["checksum"] != 4e9 {
		t.Fatalf("op %s", buf)
	}
}

func TestAcceptsGzip(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]bool{"": false, "gzip": true, "deflate, gzip;q=0.5": true, "GZIP": true,
		"gzip;q=0": false, "gzip; q=0.0": false, "br": false, "x-gzip": false} {
		if got := acceptsGzip([]string{h}); got != want {
			t.Errorf("%q: %v, want %v", h, got, want)
		}
	}
}

func TestBatchByteLimit(t *testing.T) {
	t.Parallel()
	var b batch
	big := []byte(`"` + strings.Repeat("x", maxBatchBytes/3) + `"`)
	row := &bucketstore.OpRow{Bucket: "b1", Op: bucketstore.OpPut, ObjectType: "t", ObjectID: "i", Data: big}
	added := 0
	for i := range 10 {
		row.OpID = int64(i + 1)
		if !b.add(row, 0, true) {
			break
		}
		added++
	}
	if added != 2 || b.ops != 2 || len(b.buf) > maxBatchBytes {
		t.Fatalf("added %d ops (%d bytes), want 2 within %d", added, len(b.buf), maxBatchBytes)
	}
	b.closeLine(true)
	var l struct {
		Data struct {
			NextAfter string `json:"next_after"`
			HasMore   bool   `json:"has_more"`
			Data      []json.RawMessage
		} `json:"data"`
	}
	if err := json.Unmarshal(b.buf, &l); err != nil || l.Data.NextAfter != "2" || !l.Data.HasMore || len(l.Data.Data) != 2 {
		t.Fatalf("line after rollback: %v %+v", err, l.Data.NextAfter)
	}
	// A single op larger than the limit still goes, alone.
	b.reset()
	row.Data = []byte(`"` + strings.Repeat("y", maxBatchBytes) + `"`)
	if !b.add(row, 0, true) || b.add(row, 0, true) {
		t.Fatal("an oversized op must go alone")
	}
}
