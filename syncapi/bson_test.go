package syncapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/klauspost/compress/zstd"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// writeEveryLine writes one line of every kind to lw, data lines in
// format f.
func writeEveryLine(t *testing.T, lw *lineWriter, f lineFormat) {
	t.Helper()
	buckets := []bucketEntry{{name: "1#by_list[\"a\"]", checksum: 4000000000, count: 3, priority: 1},
		{name: "global[]", checksum: 7, count: 1 << 40, priority: 3}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(lw.checkpoint(false, 42, 7, buckets, nil, nil))
	must(lw.checkpoint(true, 43, 0, buckets[:1], []string{"gone[]", "bad \xff name"}, nil))
	// Sync Streams: the streams and each bucket's subscriptions.
	streams := newStreamsInfo(&syncrules.RequestPlan{
		Streams:      []syncrules.StreamState{{Name: "lists", Default: true}, {Name: "todos"}},
		StreamErrors: []syncrules.StreamError{{Stream: "todos", Subscription: 1, Message: "bad"}, {Stream: "lists", Subscription: -1, Message: "x"}}}, nil, nil)
	sb := []bucketEntry{{name: "1#lists|0[]", checksum: 1, count: 1, priority: 3, reasons: []syncrules.StreamReason{{Stream: "lists", Subscription: -1}}},
		{name: "1#todos|0[\"a\"]", checksum: 2, count: 2, priority: 0, reasons: []syncrules.StreamReason{{Stream: "todos", Subscription: 0}, {Stream: "lists", Subscription: -1}}}}
	must(lw.checkpoint(false, 44, 0, sb, nil, streams))
	must(lw.checkpoint(true, 45, 0, sb[1:], nil, streams))
	var b batch
	rows := []bucketstore.OpRow{
		{Bucket: "b1", OpID: 1, Op: bucketstore.OpPut, ObjectType: "todos", ObjectID: "x", Subkey: "t/x",
			Data: []byte(`{"id":"x","d":"ünï \"q\"\n"}`), Checksum: 4000000000},
		{Bucket: "b1", OpID: 2, Op: bucketstore.OpRemove, ObjectType: "todos", ObjectID: "y", Checksum: 5},
		{Bucket: "b2", OpID: 3, Op: bucketstore.OpMove, Checksum: 6},
		{Bucket: "b2", OpID: 4, Op: bucketstore.OpClear, Checksum: 1 << 31},
	}
	for i := range rows {
		if !b.add(&rows[i], 0, f) {
			t.Fatal("add failed")
		}
	}
	b.closeLine(true, f)
	start := 0
	for _, l := range b.lines {
		must(lw.writeLine(b.buf[start:l.end]))
		start = l.end
	}
	must(lw.partialCheckpointComplete(43, 1))
	must(lw.checkpointComplete(43))
	must(lw.tokenExpiresIn(3600))
	must(lw.streamError("PSYNC_S2305", "too many buckets"))
	lw.close()
}

// TestBSONLinesMatchNDJSON: every line kind, written as BSON and decoded
// by the BSON library, equals the NDJSON line written for the same
// values — through identity, gzip and zstd.
func TestBSONLinesMatchNDJSON(t *testing.T) {
	t.Parallel()
	stream := func(accept, enc string) ([]byte, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/sync/stream", nil)
		req.Header.Set("Accept", accept)
		req.Header.Set("Accept-Encoding", enc)
		lw := startStream(rec, req, writeTimeout)
		f := jsonRaw
		if lw.bson {
			f = bsonLines
		}
		writeEveryLine(t, lw, f)
		if got := rec.Header().Get("Content-Type"); got != accept {
			t.Fatalf("Accept %s: Content-Type %s", accept, got)
		}
		body := rec.Body.Bytes()
		switch rec.Header().Get("Content-Encoding") {
		case "zstd":
			d, err := zstd.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if body, err = io.ReadAll(d); err != nil {
				t.Fatalf("zstd stream: %v", err)
			}
		case "gzip":
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatalf("gzip stream: %v", err)
			}
		}
		return body, rec.Header().Get("Content-Encoding")
	}
	want, _ := stream(ndjsonType, "")
	var wantLines []any
	sc := bufio.NewScanner(bytes.NewReader(want))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("NDJSON line %s: %v", sc.Bytes(), err)
		}
		wantLines = append(wantLines, v)
	}
	if len(wantLines) != 10 {
		t.Fatalf("%d NDJSON lines, want 10", len(wantLines))
	}
	for _, enc := range []string{"identity", "gzip", "zstd"} {
		got, coding := stream(bsonType, enc)
		if coding != enc && (enc != "identity" || coding != "") {
			t.Fatalf("Accept-Encoding %s: Content-Encoding %q", enc, coding)
		}
		var lines []any
		for len(got) > 0 {
			raw, rest, ok := bsoncoreSplit(got)
			if !ok {
				t.Fatalf("%s: truncated BSON after %d documents", enc, len(lines))
			}
			got = rest
			if err := raw.Validate(); err != nil {
				t.Fatalf("%s: BSON document %d: %v", enc, len(lines), err)
			}
			js, err := bson.MarshalExtJSON(raw, false, false)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(js, &v); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, v)
		}
		if !reflect.DeepEqual(lines, wantLines) {
			for i := range min(len(lines), len(wantLines)) {
				if !reflect.DeepEqual(lines[i], wantLines[i]) {
					t.Errorf("%s: line %d\nBSON   %v\nNDJSON %v", enc, i, lines[i], wantLines[i])
				}
			}
			t.Fatalf("%s: %d BSON documents, %d NDJSON lines", enc, len(lines), len(wantLines))
		}
	}
}

// bsoncoreSplit cuts the first document off a concatenation of BSON
// documents, as the SDKs split a BSON stream: by its length prefix.
func bsoncoreSplit(b []byte) (bson.Raw, []byte, bool) {
	if len(b) < 5 {
		return nil, nil, false
	}
	n := int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	if n < 5 || n > len(b) {
		return nil, nil, false
	}
	return bson.Raw(b[:n]), b[n:], true
}

// TestBSONDataLineByteLimit: a BSON data line rolled back at the batch
// limit is still one valid document whose ops array ends where the
// rollback left it.
func TestBSONDataLineByteLimit(t *testing.T) {
	t.Parallel()
	var b batch
	big := []byte(`"` + string(bytes.Repeat([]byte("x"), maxBatchBytes/3)) + `"`)
	added := 0
	for i := range 10 {
		bucket := "b1"
		if i == 1 {
			bucket = "b2" // the second op opens a second line
		}
		row := &bucketstore.OpRow{Bucket: bucket, OpID: int64(i + 1), Op: bucketstore.OpPut, ObjectType: "t", ObjectID: "i", Data: big}
		if !b.add(row, 0, bsonLines) {
			break
		}
		added++
	}
	if added != 2 || len(b.lines) != 2 {
		t.Fatalf("added %d ops on %d lines, want 2 on 2", added, len(b.lines))
	}
	b.closeLine(true, bsonLines)
	start := 0
	for i, l := range b.lines {
		doc := bson.Raw(b.buf[start:l.end])
		start = l.end
		if err := doc.Validate(); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		var line struct {
			Data struct {
				Bucket    string
				NextAfter string   `bson:"next_after"`
				HasMore   bool     `bson:"has_more"`
				Data      []bson.M `bson:"data"`
			} `bson:"data"`
		}
		if err := bson.Unmarshal(doc, &line); err != nil {
			t.Fatal(err)
		}
		if len(line.Data.Data) != 1 || line.Data.NextAfter != []string{"1", "2"}[i] || line.Data.HasMore != (i == 1) {
			t.Fatalf("line %d: %d ops, next_after %s, has_more %v", i, len(line.Data.Data), line.Data.NextAfter, line.Data.HasMore)
		}
	}
}

// TestBSONAndNDJSONSameCheckpoint: streams of one client asking for
// NDJSON, and for BSON as the SDKs do (with zstd, and with gzip), get the
// same lines for the first checkpoint and for an incremental one.
func TestBSONAndNDJSONSameCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	changes := []model.Change{e.upsert("lists", "a", "Groceries", "u1"), e.upsert("lists", "e", "Empty \"quoted\" list", "u1")}
	for i := range 30 {
		changes = append(changes, e.upsert("todos", fmt.Sprintf("t%d", i), "a", fmt.Sprintf("todo %d ✓\n", i)))
	}
	e.commit(changes...)
	tok := token(t, "u1", nil)
	sdkAccept := "application/vnd.powersync.bson-stream;q=0.9,application/x-ndjson;q=0.8"
	streams := map[string]*stream{"ndjson": e.open(tok, nil)}
	for _, enc := range []string{"zstd", "gzip"} {
		streams["bson+"+enc] = e.openWith(tok, nil, http.Header{"Accept": {sdkAccept}, "Accept-Encoding": {enc}}, bsonType)
	}
	decoded := func(ls []line) []any {
		var out []any
		for _, l := range ls {
			var v any
			if err := json.Unmarshal([]byte(l.Raw), &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	compare := func(step string) {
		t.Helper()
		want := decoded(streams["ndjson"].untilComplete())
		if len(want) < 3 {
			t.Fatalf("%s: NDJSON lines %v", step, want)
		}
		for name, s := range streams {
			if name == "ndjson" {
				continue
			}
			if got := decoded(s.untilComplete()); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %s lines\n%v\nNDJSON\n%v", step, name, got, want)
			}
		}
	}
	compare("first checkpoint")
	e.commit(e.upsert("todos", "t3", "a", "changed"), e.delete("todos", "t4"), e.upsert("lists", "b", "New", "u1"))
	compare("incremental checkpoint")
}
