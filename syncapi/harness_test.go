package syncapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/klauspost/compress/zstd"
	"go.mongodb.org/mongo-driver/v2/bson"
	noopmetric "go.opentelemetry.io/otel/metric/noop"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/checksum"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	testSecret   = "syncapi-test-secret-of-32-bytes-or-more"
	testAudience = "syncpipe-test"
	// waitLimit only turns a hang into a failure; nothing waits for it.
	waitLimit = 30 * time.Second
)

// todoRules are the rules most tests serve: every list for everyone, and
// each user's lists' todos through a parameter query.
const todoRules = `
bucket_definitions:
  global:
    data:
      - SELECT id, name FROM lists
  by_list:
    parameters: SELECT id AS list_id FROM lists WHERE owner_id = request.user_id()
    data:
      - SELECT id, list_id, description FROM todos WHERE list_id = bucket.list_id
`

var todoTables = map[string][]string{"lists": {"id", "name", "owner_id"}, "todos": {"id", "list_id", "description"}}

// testTable is a source table of an env: its storage record and the
// rules bound to its columns.
type testTable struct {
	table *model.Table
	bound *syncrules.BoundTable
	ev    *syncrules.Evaluator
}

// env is a storage database with one replication group ready to publish
// checkpoints, a Server on it and an HTTP test server in front.
type env struct {
	t      testing.TB
	ctx    context.Context
	store  *bucketstore.Store
	group  bucketstore.Group
	rules  *syncrules.Rules
	w      *bucketstore.Writer
	tables map[string]*testTable
	srv    *Server
	http   *httptest.Server
	lsn    uint64
	// sourceLSN is what Config.SourceLSN reports.
	sourceLSN atomic.Uint64
}

func newEnv(t testing.TB, rules string, tables map[string][]string, tweak func(*Config)) *env {
	t.Helper()
	ctx := context.Background()
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: pgtest.NewDB(t), MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	g, err := store.Catalog().CreateGroup(ctx, rules, "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := syncrules.Parse([]byte(rules), syncrules.Options{GroupID: strconv.Itoa(g.ID)})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, store: store, group: g, rules: parsed, tables: map[string]*testTable{}}
	rel := uint32(1000)
	for name, cols := range tables {
		rel++
		st, err := store.Catalog().RegisterTable(ctx, g.ID, rel, "public", name, []string{"id"})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Catalog().MarkTableSnapshotDone(ctx, st.ID, 0); err != nil {
			t.Fatal(err)
		}
		bound, err := parsed.Bind(name, cols)
		if err != nil {
			t.Fatal(err)
		}
		e.tables[name] = &testTable{table: &st.Table, bound: bound, ev: bound.NewEvaluator()}
	}
	if err := store.Catalog().MarkSnapshotDone(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	if e.w, err = store.Writes().NewWriter(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.w.Close)
	cfg := Config{
		Groups: store.Catalog(), Store: store.Reader(), Sources: store.Reader(),
		Auth: config.Auth{Audience: []string{testAudience}, HS256Secrets: []string{testSecret}, MaxLifetime: 24 * time.Hour},
		SourceLSN: func(context.Context) (pglogrepl.LSN, error) {
			return pglogrepl.LSN(e.sourceLSN.Load()), nil
		},
		// Each test counts into its own (discarded) meters: the OTel
		// globals are shared by parallel tests, and one of them checks
		// exact metric values.
		MeterProvider: noopmetric.NewMeterProvider(),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if e.srv, err = New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(e.srv.Handler())
	// Streams never end on their own: close the Server first.
	t.Cleanup(e.http.Close)
	t.Cleanup(e.srv.Close)
	return e
}

func rowKey(table, id string) [16]byte {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(table+"/"+id))
}

// upsert evaluates a source row (values in column order, id first) with the
// rules, as replication does, into a Change.
func (e *env) upsert(table string, vals ...string) model.Change {
	e.t.Helper()
	tt := e.tables[table]
	row := make([]model.Value, len(vals))
	for i, v := range vals {
		row[i] = model.Text(v)
	}
	c := model.Change{Table: tt.table, Kind: model.Upsert, Key: rowKey(table, vals[0])}
	outs, _, err := tt.ev.EvaluateRow(row, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, o := range outs {
		data := bytes.Clone(o.Data)
		c.Puts = append(c.Puts, model.Put{Bucket: o.Bucket, ObjectType: o.ObjectType, ObjectID: o.ObjectID,
			Data: data, Checksum: checksum.Put(o.ObjectType, o.ObjectID, data)})
	}
	if tt.bound.HasParameters() {
		c.TracksLookups = true
		entries, _, err := tt.ev.EvaluateParameterRow(row, nil, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, l := range entries {
			c.Lookups = append(c.Lookups, model.Lookup{Key: bytes.Clone(l.Key), Params: bytes.Clone(l.Rows)})
		}
	}
	return c
}

func (e *env) delete(table, id string) model.Change {
	return model.Change{Table: e.tables[table].table, Kind: model.Delete, Key: rowKey(table, id),
		TracksLookups: e.tables[table].bound.HasParameters()}
}

// commit writes changes as one stream batch and publishes a checkpoint.
func (e *env) commit(changes ...model.Change) bucketstore.Checkpoint {
	e.t.Helper()
	res, err := e.w.WriteChanges(e.ctx, changes)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.publish(res.MaxOpID)
}

// publish commits a checkpoint at the next source LSN covering opID
// (0: a keepalive that only moves the LSN).
func (e *env) publish(opID int64) bucketstore.Checkpoint {
	e.t.Helper()
	e.lsn += 16
	cp, ok, err := e.store.Writes().Commit(e.ctx, e.group.ID, pglogrepl.LSN(e.lsn), opID)
	if err != nil || !ok {
		e.t.Fatalf("commit: published=%v err=%v", ok, err)
	}
	return cp
}

// server is the Server under test.
func (e *env) server() *Server { return e.srv }

// offered waits until the server's checkpoint watcher has offered cp (or
// a newer one) to every stream: a fresh subscription gets the newest at
// once, and Latest returns once its fan-out is done.
func (e *env) offered(cp bucketstore.Checkpoint) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for got := range e.srv.watcher.Subscribe(ctx) {
		if got.OpID >= cp.OpID {
			e.srv.watcher.Latest()
			return
		}
	}
	e.t.Errorf("the watcher stopped before offering checkpoint %d", cp.OpID) // not Fatal: called on a stream's goroutine
}

// compact compacts the group's ops up to its last checkpoint and returns
// how far; the test fails unless some ops were merged into CLEARs (not
// Fatal: a test hook calls it on a stream's goroutine).
func (e *env) compact() int64 {
	e.t.Helper()
	st, err := e.store.Compactor().Compact(e.ctx, e.group.ID, bucketstore.CompactOptions{})
	if err != nil || st.Cleared == 0 {
		e.t.Errorf("compaction %+v, %v: want CLEARs", st, err)
	}
	return st.UpTo
}

// token mints an HS256 token for sub, valid for an hour; edit may change
// the claims.
func token(t testing.TB, sub string, edit func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "aud": testAudience}
	if edit != nil {
		edit(claims)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bucketJSON is a bucket of a checkpoint line.
type bucketJSON struct {
	Bucket   string `json:"bucket"`
	Checksum int64  `json:"checksum"`
	Count    int64  `json:"count"`
	Priority int    `json:"priority"`
}

// opJSON is an op of a data line; op ids must be strings.
type opJSON struct {
	OpID       string          `json:"op_id"`
	Op         string          `json:"op"`
	ObjectType *string         `json:"object_type"`
	ObjectID   *string         `json:"object_id"`
	Subkey     *string         `json:"subkey"`
	Data       json.RawMessage `json:"data"`
	Checksum   uint32          `json:"checksum"`
}

type checkpointJSON struct {
	LastOpID        string       `json:"last_op_id"`
	WriteCheckpoint string       `json:"write_checkpoint"`
	Buckets         []bucketJSON `json:"buckets"`
	Updated         []bucketJSON `json:"updated_buckets"`
	Removed         []string     `json:"removed_buckets"`
}

type dataJSON struct {
	Bucket    string   `json:"bucket"`
	After     string   `json:"after"`
	NextAfter string   `json:"next_after"`
	HasMore   bool     `json:"has_more"`
	Data      []opJSON `json:"data"`
}

// line is one parsed line of a sync stream.
type line struct {
	Raw                string          `json:"-"`
	Checkpoint         *checkpointJSON `json:"checkpoint"`
	CheckpointDiff     *checkpointJSON `json:"checkpoint_diff"`
	Data               *dataJSON       `json:"data"`
	CheckpointComplete *struct {
		LastOpID string `json:"last_op_id"`
	} `json:"checkpoint_complete"`
	PartialCheckpointComplete *struct {
		LastOpID string `json:"last_op_id"`
		Priority int    `json:"priority"`
	} `json:"partial_checkpoint_complete"`
	TokenExpiresIn *int64 `json:"token_expires_in"`
	Error          *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// kind names the line's type.
func (l line) kind() string {
	switch {
	case l.Checkpoint != nil:
		return "checkpoint"
	case l.CheckpointDiff != nil:
		return "checkpoint_diff"
	case l.Data != nil:
		return "data"
	case l.CheckpointComplete != nil:
		return "checkpoint_complete"
	case l.PartialCheckpointComplete != nil:
		return "partial_checkpoint_complete"
	case l.TokenExpiresIn != nil:
		return "token_expires_in"
	case l.Error != nil:
		return "error"
	}
	return "unknown"
}

// stream is a client's sync stream, parsed line by line on a goroutine.
type stream struct {
	t      testing.TB
	resp   *http.Response
	lines  chan line
	cancel context.CancelFunc
	done   chan struct{}
}

// request sends a sync request and returns the response; the caller
// closes its body (or cancels ctx).
func (e *env) request(ctx context.Context, tok string, body any, header http.Header, client *http.Client) *http.Response {
	e.t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			e.t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+"/sync/stream", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Token "+tok)
	}
	if client == nil {
		client = e.http.Client()
	}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// open starts a stream for body (raw_data true unless body sets it).
func (e *env) open(tok string, body map[string]any) *stream {
	e.t.Helper()
	return e.openWith(tok, body, nil, ndjsonType)
}

// openWith is open with request headers, expecting the response's
// Content-Type to be ctype.
func (e *env) openWith(tok string, body map[string]any, header http.Header, ctype string) *stream {
	e.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["raw_data"]; !ok {
		body["raw_data"] = true
	}
	ctx, cancel := context.WithCancel(e.ctx)
	resp := e.request(ctx, tok, body, header, nil)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		cancel()
		e.t.Fatalf("sync stream: HTTP %d: %s", resp.StatusCode, msg)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ctype {
		e.t.Errorf("Content-Type %q, want %q", ct, ctype)
	}
	var r io.Reader = resp.Body
	switch ce := resp.Header.Get("Content-Encoding"); ce {
	case "":
	case "zstd":
		d, err := zstd.NewReader(resp.Body)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(d.Close)
		r = d
	case "gzip":
		if !resp.Uncompressed { // the client asked for it itself
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				e.t.Fatal(err)
			}
			r = zr
		}
	default:
		e.t.Fatalf("Content-Encoding %q", ce)
	}
	s := readStream(e.t, resp, r, cancel)
	e.t.Cleanup(s.close)
	return s
}

// readStream parses body's lines on a goroutine: NDJSON, or BSON
// documents when resp says so (each turned into its relaxed extended
// JSON, so both parse into line alike).
func readStream(t testing.TB, resp *http.Response, body io.Reader, cancel context.CancelFunc) *stream {
	s := &stream{t: t, resp: resp, lines: make(chan line, 1024), cancel: cancel, done: make(chan struct{})}
	next := nextNDJSON(bufio.NewReader(body))
	if resp.Header.Get("Content-Type") == bsonType {
		next = nextBSON(t, bufio.NewReader(body))
	}
	go func() {
		defer close(s.done)
		defer close(s.lines)
		for {
			b, err := next()
			if err != nil && len(b) > 0 {
				return // cut off mid-line: the connection broke
			}
			if len(b) > 0 {
				var l line
				dec := json.NewDecoder(bytes.NewReader(b))
				if derr := dec.Decode(&l); derr != nil {
					t.Errorf("bad line %.200q: %v", b, derr)
					return
				}
				l.Raw = strings.TrimSpace(string(b))
				s.lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func nextNDJSON(r *bufio.Reader) func() ([]byte, error) {
	return func() ([]byte, error) { return r.ReadBytes('\n') }
}

// nextBSON reads the next BSON document, as the SDKs split a BSON
// stream (by its length prefix), and returns it as JSON.
func nextBSON(t testing.TB, r *bufio.Reader) func() ([]byte, error) {
	return func() ([]byte, error) {
		var n [4]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return n[:0], err
		}
		size := int(binary.LittleEndian.Uint32(n[:]))
		if size < 5 || size > 64<<20 {
			t.Errorf("BSON document of %d bytes", size)
			return n[:], io.ErrUnexpectedEOF
		}
		doc := make([]byte, size)
		copy(doc, n[:])
		if _, err := io.ReadFull(r, doc[4:]); err != nil {
			return doc, io.ErrUnexpectedEOF
		}
		js, err := bson.MarshalExtJSON(bson.Raw(doc), false, false)
		if err != nil {
			t.Errorf("BSON document %x: %v", doc, err)
			return doc, err
		}
		return js, nil
	}
}

// next returns the next line; ok is false at the end of the stream.
func (s *stream) next() (line, bool) {
	s.t.Helper()
	select {
	case l, ok := <-s.lines:
		return l, ok
	case <-time.After(waitLimit):
		s.t.Fatal("timed out waiting for a sync line")
		return line{}, false
	}
}

// until reads lines (keepalives dropped) until stop returns true for one,
// which is the last of the result.
func (s *stream) until(stop func(line) bool) []line {
	s.t.Helper()
	var out []line
	for {
		l, ok := s.next()
		if !ok {
			s.t.Fatalf("stream ended; lines so far: %v", kinds(out))
		}
		if l.TokenExpiresIn != nil {
			continue
		}
		out = append(out, l)
		if stop(l) {
			return out
		}
	}
}

// untilComplete reads up to and including the next checkpoint_complete.
func (s *stream) untilComplete() []line {
	s.t.Helper()
	return s.until(func(l line) bool { return l.CheckpointComplete != nil || l.Error != nil })
}

// close ends the stream from the client side and waits for the reader.
func (s *stream) close() {
	s.cancel()
	_ = s.resp.Body.Close()
	for range s.lines { // unblock the reader if the test stopped reading
	}
	<-s.done
}

// end reads until the server ends the stream and returns the lines.
func (s *stream) end() []line {
	s.t.Helper()
	var out []line
	for {
		l, ok := s.next()
		if !ok {
			return out
		}
		out = append(out, l)
	}
}

func kinds(ls []line) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.kind())
	}
	return out
}
