package syncapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// startStream answers r through net/http (as the server does where the
// connection cannot be taken over) and returns the stream's line writer.
func startStream(w http.ResponseWriter, r *http.Request, timeout time.Duration) *lineWriter {
	lw := newLineWriter(w, r, timeout)
	lw.answerHTTP(w)
	return lw
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

func TestNegotiateCoding(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{"": "identity", "gzip": "gzip", "deflate, gzip;q=0.5": "gzip", "GZIP": "gzip",
		"gzip;q=0": "identity", "gzip; q=0.0": "identity", "br": "identity", "x-gzip": "identity",
		"zstd": "zstd", "gzip, zstd": "zstd", "zstd;q=0.5, gzip": "gzip", "zstd, gzip;q=1.0": "zstd",
		"*": "zstd", "*;q=0.3, gzip;q=0.2": "zstd", "identity, gzip;q=0.5": "identity", "gzip;q=bad": "identity",
		"identity;q=0, *;q=0": "identity", "zstd;q=0, *": "gzip", "gzip;foo=bar;q=0.7": "gzip"} {
		if got := negotiateCoding([]string{h}); got != want {
			t.Errorf("Accept-Encoding %q: %s, want %s", h, got, want)
		}
	}
}

func TestNegotiateType(t *testing.T) {
	t.Parallel()
	sdk := "application/vnd.powersync.bson-stream;q=0.9,application/x-ndjson;q=0.8"
	for h, want := range map[string]string{"": ndjsonType, sdk: bsonType, "application/x-ndjson": ndjsonType,
		"application/vnd.powersync.bson-stream": bsonType, "*/*": ndjsonType,
		"application/vnd.powersync.bson-stream;q=0.5, application/x-ndjson": ndjsonType,
		"application/vnd.powersync.bson-stream, */*;q=0.1":                  bsonType, "text/html": ndjsonType,
		"APPLICATION/VND.POWERSYNC.BSON-STREAM": bsonType} {
		if got := negotiateType([]string{h}); got != want {
			t.Errorf("Accept %q: %s, want %s", h, got, want)
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
		if !b.add(row, 0, jsonRaw) {
			break
		}
		added++
	}
	if added != 2 || b.ops != 2 || len(b.buf) > maxBatchBytes {
		t.Fatalf("added %d ops (%d bytes), want 2 within %d", added, len(b.buf), maxBatchBytes)
	}
	b.closeLine(true, jsonRaw)
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
	if !b.add(row, 0, jsonRaw) || b.add(row, 0, jsonRaw) {
		t.Fatal("an oversized op must go alone")
	}
}

// TestSharedBatchReadOnly: a batch sending a shared read's lines
// (sharedread.go) reads its own next batch into new buffers, never over
// the shared bytes other streams are sending; release leaves nothing.
func TestSharedBatchReadOnly(t *testing.T) {
	t.Parallel()
	shared := []byte(`{"data":{"bucket":"b1"}}` + "\n")
	orig := bytes.Clone(shared)
	b := batch{buf: shared, lines: []dataLine{{bucket: "b1", end: len(shared)}}, shared: true}
	b.reset()
	row := &bucketstore.OpRow{Bucket: "b2", OpID: 9, Op: bucketstore.OpPut, ObjectType: "t", ObjectID: "i", Data: []byte(`"x"`)}
	if !b.add(row, 0, jsonRaw) {
		t.Fatal("add to an empty batch failed")
	}
	b.closeLine(false, jsonRaw)
	if !bytes.Equal(shared, orig) || b.shared {
		t.Fatalf("shared bytes now %q (shared %v), want %q untouched", shared, b.shared, orig)
	}
	b.release()
	if b.buf != nil || b.lines != nil {
		t.Fatalf("released batch keeps %d bytes and %d lines", cap(b.buf), cap(b.lines))
	}
}

// gzipClient is one compressed stream as its client receives it.
type gzipClient struct {
	z    gzipStream
	sent bytes.Buffer // compressed bytes
	want []byte       // the lines, uncompressed
}

// send compresses a line (or, with last, the end) as writeLine does.
func (c *gzipClient) send(t *testing.T, line []byte, last bool) {
	t.Helper()
	out := getCompressed()
	defer putCompressed(out)
	if err := c.z.encode(out, line, last); err != nil {
		t.Fatal(err)
	}
	c.sent.Write(out.Bytes())
	c.want = append(c.want, line...)
}

// decode reads the bytes sent so far as a single gzip member.
func (c *gzipClient) decode() ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(c.sent.Bytes()))
	if err != nil {
		return nil, err
	}
	zr.Multistream(false)
	got, err := io.ReadAll(zr)
	if err == nil && zr.Close() == nil {
		// A reader at the end of one member must see no second one.
		if _, err2 := zr.Read(make([]byte, 1)); err2 != io.EOF {
			err = fmt.Errorf("data after the member: %v", err2)
		}
	}
	return got, err
}

// TestGzipLines: lines compressed one at a time, interleaved between two
// streams that share the flate writer pool, decode after every line to
// exactly the lines so far (each one reaches the client when written),
// and end in one gzip member whose trailer (CRC-32, size) gzip.Reader
// verifies.
func TestGzipLines(t *testing.T) {
	t.Parallel()
	var cs [2]gzipClient
	for i := range 40 {
		c := &cs[i%2]
		line := fmt.Sprintf(`{"token_expires_in":%d}`+"\n", i)
		switch i % 7 {
		case 3: // more than one 64 KB deflate block
			line = `{"data":"` + strings.Repeat(fmt.Sprintf("row %d of stream %d, ", i, i%2), 3000) + "\"}\n"
		case 5: // just over the stored size: deflated
			line = `{"data":"` + strings.Repeat("x", storedBelow) + "\"}\n"
		}
		before := c.sent.Len()
		c.send(t, []byte(line), false)
		size := len(line) + 10 // a stored block and the sync marker
		if before == 0 {
			size += len(gzipHeader)
		}
		if stored := c.sent.Len()-before == size; stored != (len(line) < storedBelow) {
			t.Fatalf("line %d of %d bytes took %d bytes: stored %v, want stored below %d", i, len(line), c.sent.Len()-before, stored, storedBelow)
		}
		got, err := c.decode()
		if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, c.want) {
			t.Fatalf("line %d: decoded %d bytes (%v), want the %d sent so far and an unfinished stream", i, len(got), err, len(c.want))
		}
	}
	for i := range cs {
		cs[i].send(t, nil, true)
		got, err := cs[i].decode()
		if err != nil || !bytes.Equal(got, cs[i].want) {
			t.Fatalf("stream %d: decoded %d bytes (%v), want %d and a complete member", i, len(got), err, len(cs[i].want))
		}
	}
	var empty gzipClient // a stream closed before any line
	empty.send(t, nil, true)
	if got, err := empty.decode(); err != nil || len(got) != 0 {
		t.Fatalf("empty stream: %q, %v", got, err)
	}
}

// FuzzNegotiate: any Accept and Accept-Encoding give one of the known
// media types and codings, and a coding the client gave a weight of 0
// is never chosen over identity.
func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"", "gzip", "zstd;q=0.5, gzip;q=0.4", "*;q=0", "gzip;q=", ";;,,q=1", "application/*;q=0.9",
		"application/vnd.powersync.bson-stream;q=0.9,application/x-ndjson;q=0.8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if ct := negotiateType([]string{h}); ct != ndjsonType && ct != bsonType {
			t.Fatalf("Accept %q: %q", h, ct)
		}
		c := negotiateCoding([]string{h})
		if c != codingIdentity && c != codingGzip && c != codingZstd {
			t.Fatalf("Accept-Encoding %q: %q", h, c)
		}
		if c != codingIdentity && parseQValues([]string{h}).weight(c, 0, "*") == 0 {
			t.Fatalf("Accept-Encoding %q: chose %s, which it refuses", h, c)
		}
	})
}

// TestCheckpointStreams: with Sync Streams, the full checkpoint lists the
// connection's streams with their errors, and every bucket (in diffs too)
// its subscriptions: {"default": index in that list} or {"sub": the
// request's subscription index}; without streams nothing changes.
func TestCheckpointStreams(t *testing.T) {
	rec := httptest.NewRecorder()
	lw := startStream(rec, httptest.NewRequest("POST", "/sync/stream", nil), writeTimeout)
	si := newStreamsInfo(&syncrules.RequestPlan{
		Streams:      []syncrules.StreamState{{Name: "lists", Default: true}, {Name: "todos"}},
		StreamErrors: []syncrules.StreamError{{Stream: "todos", Subscription: 1, Message: "Expected JSON string"}}}, nil, nil)
	b := []bucketEntry{{name: "1#todos|0[\"a\"]", checksum: 2, count: 2, priority: 0,
		reasons: []syncrules.StreamReason{{Stream: "todos", Subscription: 0}, {Stream: "lists", Subscription: -1}}}}
	for _, err := range []error{lw.checkpoint(false, 5, 0, b, nil, si), lw.checkpoint(true, 6, 0, b, []string{"x"}, si), lw.checkpoint(false, 7, 0, b, nil, nil)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	lw.close()
	want := `{"checkpoint":{"last_op_id":"5","buckets":[{"bucket":"1#todos|0[\"a\"]","checksum":2,"count":2,"priority":0,"subscriptions":[{"sub":0},{"default":0}]}],` +
		`"streams":[{"name":"lists","is_default":true,"errors":[]},{"name":"todos","is_default":false,"errors":[{"subscription":1,"message":"Expected JSON string"}]}]}}` + "\n" +
		`{"checkpoint_diff":{"last_op_id":"6","updated_buckets":[{"bucket":"1#todos|0[\"a\"]","checksum":2,"count":2,"priority":0,"subscriptions":[{"sub":0},{"default":0}]}],"removed_buckets":["x"]}}` + "\n" +
		`{"checkpoint":{"last_op_id":"7","buckets":[{"bucket":"1#todos|0[\"a\"]","checksum":2,"count":2,"priority":0}]}}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("lines:\n%s\nwant:\n%s", got, want)
	}
}
