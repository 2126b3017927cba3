package syncapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// The tests in this file run the sync protocol against the in-memory
// fakeStore (fake_test.go): no PostgreSQL, so they run with -short and
// pin down what the server does with what Storage answers, apart from
// how bucketstore computes those answers (harness_test.go's tests cover
// both together).

// TestFakeFirstSync: a first sync is token_expires_in, one checkpoint
// with exactly the client's buckets and the storage's checksums and
// counts, their ops, and checkpoint_complete; reconnecting with those
// positions sends no op again.
func TestFakeFirstSync(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	changes := []model.Change{
		e.upsert("lists", "a", "Groceries", "u1"),
		e.upsert("lists", "b", "Work", "u2"),
		e.upsert("lists", "e", "Empty", "u1"),
		e.upsert("todos", "tb", "b", "not for u1"),
	}
	for i := range 3 {
		changes = append(changes, e.upsert("todos", fmt.Sprintf("t%d", i), "a", fmt.Sprintf("todo %d", i)))
	}
	cp := e.commit(changes...)

	s := e.open(token(t, "u1", nil), nil)
	if l, _ := s.next(); l.TokenExpiresIn == nil || *l.TokenExpiresIn < 3590 {
		t.Fatalf("first line %s, want token_expires_in ≈ 3600", l.Raw)
	}
	ls := s.untilComplete()
	got := kinds(ls)
	if got[0] != "checkpoint" || got[len(got)-1] != "checkpoint_complete" || slices.Contains(got[1:len(got)-1], "checkpoint") {
		t.Fatalf("lines %v, want checkpoint, data…, checkpoint_complete", got)
	}
	head := ls[0].Checkpoint
	if head.LastOpID != opID(cp.OpID) || head.WriteCheckpoint != "" {
		t.Errorf("checkpoint %s, want last_op_id %d and no write_checkpoint", ls[0].Raw, cp.OpID)
	}
	want := expected(changes)
	wantNames := []string{e.b("by_list", "a"), e.b("by_list", "e"), e.b("global")}
	if names := bucketNames(head.Buckets); !slices.Equal(names, wantNames) {
		t.Fatalf("buckets %v, want %v (not u2's list b)", names, wantNames)
	}
	for _, b := range head.Buckets {
		if w := want[b.Bucket]; b.Checksum != w.Checksum || b.Count != w.Count || b.Priority != 3 {
			t.Errorf("bucket %s: %d/%d priority %d, want %d/%d priority 3", b.Bucket, b.Checksum, b.Count, b.Priority, w.Checksum, w.Count)
		}
	}
	c := newClient(t)
	c.apply(ls...) // checks every bucket's ops against its checksum and count
	if c.complete != opID(cp.OpID) || c.ops != 6 {
		t.Fatalf("completed %q with %d ops, want %d with 6 (3 lists, 3 todos)", c.complete, c.ops, cp.OpID)
	}
	if got := c.rows[e.b("by_list", "a")]["todos/t1"]; got != `{"id":"t1","list_id":"a","description":"todo 1"}` {
		t.Errorf("row t1 %q", got)
	}
	s.close()

	s = e.open(token(t, "u1", nil), map[string]any{"buckets": c.positions()})
	if got := kinds(s.untilComplete()); !slices.Equal(got, []string{"checkpoint", "checkpoint_complete"}) {
		t.Fatalf("resumed stream: lines %v, want no data", got)
	}
}

// TestFakeCheckpointDiff: a checkpoint published while a stream is open
// reaches it as a checkpoint_diff naming only what changed for the
// client (new and changed buckets, then a removed one), followed by just
// the new ops.
func TestFakeCheckpointDiff(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	changes := []model.Change{e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"), e.upsert("todos", "t1", "a", "one")}
	e.commit(changes...)
	s := e.open(token(t, "u1", nil), nil)
	c := newClient(t)
	c.apply(s.untilComplete()...)

	// A todo in a, and a new list of u1: its bucket is new to the client.
	more := []model.Change{e.upsert("todos", "t2", "a", "two"), e.upsert("lists", "c", "C", "u1")}
	cp := e.commit(more...)
	ls := s.untilComplete()
	c.apply(ls...)
	d := ls[0].CheckpointDiff
	if d == nil || d.LastOpID != opID(cp.OpID) || len(d.Removed) != 0 {
		t.Fatalf("first line %s, want a checkpoint_diff at %d removing nothing", ls[0].Raw, cp.OpID)
	}
	wantUpdated := []string{e.b("by_list", "a"), e.b("by_list", "c"), e.b("global")}
	if names := bucketNames(d.Updated); !slices.Equal(names, wantUpdated) {
		t.Fatalf("updated %v, want %v (by_list b is unchanged)", names, wantUpdated)
	}
	want := expected(append(changes, more...))
	for _, b := range d.Updated {
		if w := want[b.Bucket]; b.Checksum != w.Checksum || b.Count != w.Count {
			t.Errorf("bucket %s: %d/%d, want %d/%d", b.Bucket, b.Checksum, b.Count, w.Checksum, w.Count)
		}
	}
	if c.ops != 5 || c.complete != opID(cp.OpID) {
		t.Fatalf("%d ops in all, completed %q: want the first 3 + the 2 new, at %d", c.ops, c.complete, cp.OpID)
	}

	// List a moves to u2: its bucket leaves the client.
	cp = e.commit(e.upsert("lists", "a", "A", "u2"))
	ls = s.untilComplete()
	c.apply(ls...)
	if d := ls[0].CheckpointDiff; d == nil || !slices.Equal(d.Removed, []string{e.b("by_list", "a")}) ||
		!slices.Equal(bucketNames(d.Updated), []string{e.b("global")}) {
		t.Fatalf("diff %s, want by_list a removed and only global updated", ls[0].Raw)
	}
	if _, ok := c.rows[e.b("by_list", "a")]; ok || c.complete != opID(cp.OpID) {
		t.Fatalf("client still has by_list a, or completed %q, not %d", c.complete, cp.OpID)
	}
}

// TestFakeWriteCheckpoint: GET /write-checkpoint2.json stores a write
// checkpoint at the source LSN, and the client's stream reports it in
// the first checkpoint whose LSN reaches it (a keepalive diff with no
// bucket changes), not before, and only to that client.
func TestFakeWriteCheckpoint(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	cp := e.commit(e.upsert("lists", "a", "A", "u1"))
	tok := token(t, "u1", nil)
	e.sourceLSN.Store(e.lsn + 1000) // the source is ahead of replication
	if wc := fakeWriteCheckpoint(t, e, tok, "c1"); wc != "1" {
		t.Fatalf("write checkpoint %q, want 1", wc)
	}
	s := e.open(tok, map[string]any{"client_id": "c1"})
	if ls := s.untilComplete(); ls[0].Checkpoint.WriteCheckpoint != "" {
		t.Fatalf("reported before replication reached it: %s", ls[0].Raw)
	}
	e.lsn = e.sourceLSN.Load() - 16
	keep := e.publish(cp.OpID) // only the LSN moves
	ls := s.untilComplete()
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "checkpoint_complete"}) {
		t.Fatalf("lines %v", got)
	}
	if d := ls[0].CheckpointDiff; d.WriteCheckpoint != "1" || len(d.Updated)+len(d.Removed) != 0 || d.LastOpID != opID(keep.OpID) {
		t.Fatalf("diff %s, want write_checkpoint 1 and no bucket changes", ls[0].Raw)
	}
	if ls := e.open(tok, map[string]any{"client_id": "c2"}).untilComplete(); ls[0].Checkpoint.WriteCheckpoint != "" {
		t.Fatalf("another client of the user got it: %s", ls[0].Raw)
	}
	if wc := fakeWriteCheckpoint(t, e, tok, "c1"); wc != "2" {
		t.Fatalf("second write checkpoint %q, want 2", wc)
	}
}

// TestFakeCheckpointRequest: POST /sync/checkpoint-request (the SDKs'
// checkpoint_mode "requests") stores the client's own id — the larger of
// it and the stored one — at the source LSN and answers it under both
// names; the stream reports it once replication reaches that LSN.
// Malformed requests get 400 naming the field.
func TestFakeCheckpointRequest(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	cp := e.commit(e.upsert("lists", "a", "A", "u1"))
	tok := token(t, "u1", nil)
	e.sourceLSN.Store(e.lsn + 1000)
	request := func(body string) (int, string) {
		rec := httpRecord(e.srv, http.MethodPost, "/sync/checkpoint-request", "Bearer "+tok, body)
		return rec.Code, rec.Body.String()
	}
	want := `{"data":{"checkpoint_request_id":"7","write_checkpoint":"7"}}`
	if code, body := request(`{"client_id":"c1","checkpoint_request_id":"7"}`); code != http.StatusOK || strings.TrimSpace(body) != want {
		t.Fatalf("request 7: HTTP %d %s, want %s", code, body, want)
	}
	if code, body := request(`{"client_id":"c1","checkpoint_request_id":3}`); code != http.StatusOK || strings.TrimSpace(body) != want {
		t.Fatalf("request 3 after 7: HTTP %d %s, want %s", code, body, want)
	}
	for body, msg := range map[string]string{
		`[]`: "must be a JSON object", `{"checkpoint_request_id":"1"}`: "client_id must be a string",
		`{"client_id":"c1","checkpoint_request_id":"0"}`: "from 1 to 2^63-1", `{"client_id":"c1","checkpoint_request_id":true}`: "decimal string",
	} {
		if code, got := request(body); code != http.StatusBadRequest || !strings.Contains(got, msg) {
			t.Errorf("%s: HTTP %d %s, want 400 with %q", body, code, got, msg)
		}
	}
	s := e.open(tok, map[string]any{"client_id": "c1"})
	if ls := s.untilComplete(); ls[0].Checkpoint.WriteCheckpoint != "" {
		t.Fatalf("reported before replication reached it: %s", ls[0].Raw)
	}
	e.lsn = e.sourceLSN.Load()
	e.publish(cp.OpID)
	if ls := s.untilComplete(); ls[0].CheckpointDiff.WriteCheckpoint != "7" {
		t.Fatalf("once replicated: %s, want write_checkpoint 7", ls[0].Raw)
	}
}

// fakeWriteCheckpoint asks for a write checkpoint and returns its number.
func fakeWriteCheckpoint(t *testing.T, e *fakeEnv, tok, client string) string {
	t.Helper()
	rec := httpRecord(e.srv, http.MethodGet, "/write-checkpoint2.json?client_id="+client, "Bearer "+tok, "")
	var body struct {
		Data struct {
			WriteCheckpoint string `json:"write_checkpoint"`
		} `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("write checkpoint: HTTP %d %s", rec.Code, rec.Body)
	}
	return body.Data.WriteCheckpoint
}

// TestFakeMissingTokenParameter: a token without the claim a bucket
// parameter comes from still entitles the client to the […[null]]
// bucket, served empty with checksum 0 (PowerSync's NULL rule); with the
// claim, the client gets the tenant's bucket and its op.
func TestFakeMissingTokenParameter(t *testing.T) {
	t.Parallel()
	const rules = `bucket_definitions:
  tenant_items:
    parameters: SELECT request.jwt() ->> 'tenant' AS tenant
    data:
      - SELECT id, tenant FROM items WHERE tenant = bucket.tenant
`
	e := newFakeEnv(t, rules, map[string][]string{"items": {"id", "tenant"}}, nil)
	item := e.upsert("items", "i1", "t1")
	e.commit(item)

	ls := e.open(token(t, "u1", nil), nil).untilComplete()
	null := bucketJSON{Bucket: fmt.Sprintf("%d#tenant_items[null]", e.group.ID), Priority: 3}
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint", "checkpoint_complete"}) ||
		len(ls[0].Checkpoint.Buckets) != 1 || ls[0].Checkpoint.Buckets[0] != null {
		t.Fatalf("lines %v, checkpoint %s: want only the empty %s", got, ls[0].Raw, null.Bucket)
	}
	if !strings.Contains(ls[0].Raw, `"checksum":0,`) {
		t.Fatalf("checkpoint %s lacks checksum 0", ls[0].Raw)
	}

	ls = e.open(token(t, "u1", func(c jwt.MapClaims) { c["tenant"] = "t1" }), nil).untilComplete()
	c := newClient(t)
	c.apply(ls...)
	want := expected([]model.Change{item})[e.b("tenant_items", "t1")]
	if bs := ls[0].Checkpoint.Buckets; len(bs) != 1 || bs[0].Bucket != want.Bucket || bs[0].Checksum != want.Checksum || c.ops != 1 {
		t.Fatalf("checkpoint %s with %d ops, want %s with its one op", ls[0].Raw, c.ops, want.Bucket)
	}
}

// TestFakeLargeBucketPages: a bucket larger than one read arrives in
// several data lines, each continuing where the last stopped, has_more
// on all but its last; the ops add up to the announced checksum.
func TestFakeLargeBucketPages(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	changes := []model.Change{e.upsert("lists", "a", "A", "u1")}
	for i := range 2500 {
		changes = append(changes, e.upsert("todos", fmt.Sprintf("t%04d", i), "a", "x"))
	}
	e.commit(changes...)
	ls := e.open(token(t, "u1", nil), nil).untilComplete()
	c := newClient(t)
	c.apply(ls...)
	var pages []bool
	for _, l := range ls {
		if l.Data != nil && l.Data.Bucket == e.b("by_list", "a") {
			pages = append(pages, l.Data.HasMore)
		}
	}
	if len(pages) < 3 || slices.Contains(pages[:len(pages)-1], false) || pages[len(pages)-1] {
		t.Fatalf("has_more of by_list a's lines %v, want true… then false over ≥ 3 lines", pages)
	}
	if c.ops != 2501 || c.counts[e.b("by_list", "a")] != 2500 {
		t.Fatalf("%d ops, %d in by_list a; want 2501, 2500", c.ops, c.counts[e.b("by_list", "a")])
	}
}

// TestFakeTooManyBuckets: a client entitled to more buckets than
// max_buckets_per_connection gets PSYNC_S2305 instead of a partial sync.
func TestFakeTooManyBuckets(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, func(c *Config) { c.MaxBucketsPerConnection = 2 })
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"))
	ls := e.open(token(t, "u1", nil), nil).end()
	last := ls[len(ls)-1]
	if last.Error == nil || last.Error.Code != codeTooManyBuckets || slices.Contains(kinds(ls), "checkpoint") {
		t.Fatalf("lines %v, last %s: want an %s error and no checkpoint", kinds(ls), last.Raw, codeTooManyBuckets)
	}
}

// TestNewNeedsSourcesBesideStorage: without Config.Sources to build the
// checksum cache and checkpoint watcher, New refuses a Config without
// them, and the change records baseline, which switches the cache New
// builds, with a given one; groups and storage are required, a nil
// *bucketstore role value included.
func TestNewNeedsSourcesBesideStorage(t *testing.T) {
	t.Parallel()
	f := newFakeStore(1, todoRules)
	for _, c := range []struct {
		want string
		cfg  Config
	}{
		{"Config.Checksums", Config{Groups: f, Store: f, Checkpoints: f}},
		{"Config.Checkpoints", Config{Groups: f, Store: f, Checksums: f}},
		{"IgnoreChangeRecords", Config{Groups: f, Store: f, Checksums: f, Checkpoints: f, Baseline: Baseline{IgnoreChangeRecords: true}}},
		{"Config.Store is required", Config{Groups: f, Checksums: f, Checkpoints: f}},
		{"Config.Store is required", Config{Groups: f, Store: (*bucketstore.Reader)(nil), Checksums: f, Checkpoints: f}},
		{"Config.Groups is required", Config{Store: f, Checksums: f, Checkpoints: f}},
	} {
		if _, err := New(t.Context(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error naming %s", err, c.want)
		}
	}
}
