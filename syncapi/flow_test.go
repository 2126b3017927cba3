package syncapi

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

func TestRowMovesBetweenBuckets(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, rowMovesBetweenBuckets)
}

func rowMovesBetweenBuckets(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"), e.upsert("todos", "t1", "a", "move me"))
	s := e.open(token(t, "u1", nil), nil)
	c := newClient(t)
	c.apply(s.untilComplete()...)
	a, b := e.b("by_list", "a"), e.b("by_list", "b")

	// t1 moves from list a to list b: REMOVE in a, PUT in b.
	e.commit(e.upsert("todos", "t1", "b", "move me"))
	ls := s.untilComplete()
	c.apply(ls...)
	var updated []string
	for _, u := range ls[0].CheckpointDiff.Updated {
		updated = append(updated, u.Bucket)
	}
	slices.Sort(updated)
	if !slices.Equal(updated, []string{a, b}) {
		t.Fatalf("updated buckets %v, want %s and %s", updated, a, b)
	}
	ops := map[string]string{}
	for _, l := range ls {
		if l.Data != nil {
			for _, op := range l.Data.Data {
				ops[l.Data.Bucket] += op.Op
			}
		}
	}
	if ops[a] != "REMOVE" || ops[b] != "PUT" {
		t.Fatalf("ops %v, want REMOVE in a and PUT in b", ops)
	}
	if _, ok := c.rows[a]["todos/t1"]; ok || c.rows[b]["todos/t1"] == "" {
		t.Fatalf("rows %v", c.rows)
	}

	// t1 is deleted: a REMOVE in b only.
	e.commit(e.delete("todos", "t1"))
	ls = s.untilComplete()
	c.apply(ls...)
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "data", "checkpoint_complete"}) ||
		len(ls[0].CheckpointDiff.Updated) != 1 || ls[1].Data.Bucket != b || ls[1].Data.Data[0].Op != "REMOVE" {
		t.Fatalf("delete: %v %s", got, ls[1].Raw)
	}
	if len(c.rows[b]) != 0 {
		t.Fatalf("rows of b after the delete: %v", c.rows[b])
	}

	// List b changes owner: its bucket is removed for u1; global changes.
	e.commit(e.upsert("lists", "b", "B", "u2"))
	ls = s.untilComplete()
	c.apply(ls...)
	d := ls[0].CheckpointDiff
	if d == nil || !slices.Equal(d.Removed, []string{b}) || len(d.Updated) != 1 || d.Updated[0].Bucket != e.b("global") {
		t.Fatalf("diff %s, want %s removed and global updated", ls[0].Raw, b)
	}
	if _, ok := c.target[b]; ok {
		t.Fatal("bucket b still in the client's checkpoint")
	}
}

const priorityRules = `
bucket_definitions:
  later:
    data:
      - SELECT id, name FROM lists WHERE name = 'later'
  first:
    priority: 0
    data:
      - SELECT id, name FROM lists WHERE name = 'first'
  second:
    priority: 1
    data:
      - SELECT id, name FROM lists WHERE name = 'second'
`

func TestPriorities(t *testing.T) {
	t.Parallel()
	onBoth(t, priorityRules, map[string][]string{"lists": {"id", "name"}}, nil, priorities)
}

func priorities(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "1", "later"), e.upsert("lists", "2", "second"), e.upsert("lists", "3", "first"))
	s := e.open(token(t, "u1", nil), nil)
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...)
	var got []string
	for _, l := range ls {
		switch {
		case l.Data != nil:
			got = append(got, "data "+l.Data.Bucket)
		case l.PartialCheckpointComplete != nil:
			got = append(got, fmt.Sprintf("partial %d", l.PartialCheckpointComplete.Priority))
		default:
			got = append(got, l.kind())
		}
	}
	want := []string{"checkpoint", "data " + e.b("first"), "partial 0", "data " + e.b("second"), "partial 1",
		"data " + e.b("later"), "checkpoint_complete"}
	if !slices.Equal(got, want) {
		t.Fatalf("lines\n%v\nwant\n%v", got, want)
	}
	prios := map[string]int{}
	for _, b := range ls[0].Checkpoint.Buckets {
		prios[b.Bucket] = b.Priority
	}
	if prios[e.b("first")] != 0 || prios[e.b("second")] != 1 || prios[e.b("later")] != 3 {
		t.Fatalf("priorities %v", prios)
	}
}

func TestWriteCheckpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	e.commit(e.upsert("lists", "a", "A", "u1"))
	tok := token(t, "u1", nil)
	writeCheckpoint := func(client string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/write-checkpoint2.json?client_id="+client, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				WriteCheckpoint string `json:"write_checkpoint"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("write checkpoint: HTTP %d, %v", resp.StatusCode, err)
		}
		return body.Data.WriteCheckpoint
	}
	// The source is ahead of the last checkpoint: the write checkpoint is
	// due once replication passes that position.
	e.sourceLSN.Store(e.lsn + 1000)
	if wc := writeCheckpoint("c1"); wc != "1" {
		t.Fatalf("write checkpoint %q, want 1", wc)
	}
	s := e.open(tok, map[string]any{"client_id": "c1"})
	ls := s.untilComplete()
	if ls[0].Checkpoint.WriteCheckpoint != "" {
		t.Fatalf("write checkpoint reported before replication reached it: %s", ls[0].Raw)
	}
	// Replication passes the position (a keepalive moves only the LSN).
	e.lsn = e.sourceLSN.Load() - 16
	cp := e.publish(0)
	ls = s.untilComplete()
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "checkpoint_complete"}) {
		t.Fatalf("lines %v", got)
	}
	if d := ls[0].CheckpointDiff; d.WriteCheckpoint != "1" || len(d.Updated)+len(d.Removed) != 0 || d.LastOpID != opID(cp.OpID) {
		t.Fatalf("diff %s, want write_checkpoint 1 and no bucket changes", ls[0].Raw)
	}
	// A new stream of the client gets it in its first checkpoint; another
	// client of the same user does not.
	s.close()
	if ls := e.open(tok, map[string]any{"client_id": "c1"}).untilComplete(); ls[0].Checkpoint.WriteCheckpoint != "1" {
		t.Fatalf("reconnect: %s", ls[0].Raw)
	}
	if ls := e.open(tok, map[string]any{"client_id": "c2"}).untilComplete(); ls[0].Checkpoint.WriteCheckpoint != "" {
		t.Fatalf("other client: %s", ls[0].Raw)
	}

	// Without a source the endpoint answers 503.
	srv, err := New(e.ctx, Config{Groups: e.store.Catalog(), Store: e.store.Reader(), Sources: e.store.Reader(), Auth: e.srv.cfg.Auth})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := httpRecord(srv, http.MethodGet, "/write-checkpoint2.json?client_id=c1", "Token "+tok, "")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("without SourceLSN: HTTP %d %s", rec.Code, rec.Body)
	}
}

func TestTokenExpiryClosesStream(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	e := newEnv(t, todoRules, todoTables, func(c *Config) {
		// The server's clock is 300 ms before the token's exp.
		c.Now = func() time.Time { return exp.Add(-300 * time.Millisecond) }
	})
	e.commit(e.upsert("lists", "a", "A", "u1"))
	tok := token(t, "u1", func(c jwt.MapClaims) { c["exp"] = exp.Unix(); c["iat"] = exp.Add(-time.Hour).Unix() })
	s := e.open(tok, nil)
	ls := s.end() // the server ends the stream
	if len(ls) < 2 || ls[len(ls)-1].TokenExpiresIn == nil || *ls[len(ls)-1].TokenExpiresIn != 0 {
		t.Fatalf("lines %v, want the stream to end with token_expires_in 0", kinds(ls))
	}
	if ls[0].TokenExpiresIn == nil || *ls[0].TokenExpiresIn != 0 {
		t.Fatalf("first line %s, want token_expires_in 0 (less than a second left)", ls[0].Raw)
	}
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, func(c *Config) { c.KeepaliveInterval = 20 * time.Millisecond }, keepalive)
}

func keepalive(t *testing.T, e protocolEnv) {
	s := e.open(token(t, "u1", nil), nil)
	// No checkpoint exists yet: keepalives are all there is.
	for i := range 3 {
		l, ok := s.next()
		if !ok || l.TokenExpiresIn == nil || *l.TokenExpiresIn < 3590 {
			t.Fatalf("line %d: %s, want token_expires_in", i, l.Raw)
		}
	}
}

// publishDuringFirstSync commits 2,500 lists of nobody's (the global
// bucket: more than one data line) and arranges that, after the first
// data line a stream sends, one more list is committed and its checkpoint
// offered to every subscriber. It returns the first checkpoint and a
// function returning the second once it was published.
func publishDuringFirstSync(t *testing.T, e protocolEnv) (bucketstore.Checkpoint, func() bucketstore.Checkpoint) {
	t.Helper()
	var lists []model.Change
	for i := range 2500 {
		lists = append(lists, e.upsert("lists", fmt.Sprintf("l%04d", i), "list", "nobody"))
	}
	first := e.commit(lists...)
	var second bucketstore.Checkpoint
	calls := 0
	e.server().afterDataLine = func() {
		// Runs on the stream's goroutine after each data line: after the
		// first, publish a new checkpoint and wait until it was offered
		// to every subscriber.
		if calls++; calls != 1 {
			return
		}
		second = e.commit(e.upsert("lists", "new", "list", "nobody"))
		e.offered(second)
	}
	return first, func() bucketstore.Checkpoint { return second }
}

// TestSupersededCheckpoint: a checkpoint published while a long send is
// under way interrupts it (supersedeAfter 0 here: every send is long).
func TestSupersededCheckpoint(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, supersededCheckpoint)
}

func supersededCheckpoint(t *testing.T, e protocolEnv) {
	e.server().supersedeAfter = 0
	first, second := publishDuringFirstSync(t, e)
	s := e.open(token(t, "u1", nil), nil)
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...)
	got := kinds(ls)
	if !slices.Equal(got[:3], []string{"checkpoint", "data", "checkpoint_diff"}) || got[len(got)-1] != "checkpoint_complete" {
		t.Fatalf("lines %v, want checkpoint, one data line, then the new checkpoint's diff", got)
	}
	if ls[0].Checkpoint.LastOpID != opID(first.OpID) || ls[2].CheckpointDiff.LastOpID != opID(second().OpID) ||
		ls[len(ls)-1].CheckpointComplete.LastOpID != opID(second().OpID) {
		t.Fatalf("checkpoints %s / %s / %s, want %d then %d", ls[0].Raw[:60], ls[2].Raw[:60], ls[len(ls)-1].Raw, first.OpID, second().OpID)
	}
	if c.ops != 2501 || len(c.rows[e.b("global")]) != 2501 {
		t.Fatalf("%d ops, %d rows; want 2501 each", c.ops, len(c.rows[e.b("global")]))
	}
	if n := len(ls[1].Data.Data); n != readBatchOps || !ls[1].Data.HasMore {
		t.Fatalf("first data line has %d ops (has_more %v), want %d and more", n, ls[1].Data.HasMore, readBatchOps)
	}
}

// TestNewerCheckpointWaitsForShortSend: a checkpoint published while a
// short send is under way waits for it: the client completes the first
// checkpoint, then gets the second's diff and data.
func TestNewerCheckpointWaitsForShortSend(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, newerCheckpointWaitsForShortSend)
}

func newerCheckpointWaitsForShortSend(t *testing.T, e protocolEnv) {
	first, second := publishDuringFirstSync(t, e)
	s := e.open(token(t, "u1", nil), nil)
	c := newClient(t)
	ls := s.untilComplete()
	c.apply(ls...)
	if last := ls[len(ls)-1].CheckpointComplete.LastOpID; last != opID(first.OpID) || slices.Contains(kinds(ls), "checkpoint_diff") {
		t.Fatalf("lines %v completing %s, want the first checkpoint (%d) completed without a diff", kinds(ls), last, first.OpID)
	}
	ls = s.untilComplete()
	c.apply(ls...)
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "data", "checkpoint_complete"}) ||
		ls[len(ls)-1].CheckpointComplete.LastOpID != opID(second().OpID) {
		t.Fatalf("then lines %v, want the second checkpoint's diff, data and completion at %d", got, second().OpID)
	}
	if c.ops != 2501 {
		t.Fatalf("%d ops, want 2501", c.ops)
	}
}

func TestMaxBucketsPerConnection(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, func(c *Config) { c.MaxBucketsPerConnection, c.MaxParameterQueryResults = 2, 2 }, maxBucketsPerConnection)
}

func maxBucketsPerConnection(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"),
		e.upsert("lists", "c", "C", "u2"), e.upsert("lists", "d", "D", "u2"), e.upsert("lists", "e", "E", "u2"))
	// u1: 3 buckets; u2: 3 parameter rows. The messages start as
	// PowerSync's, which tell the two limits apart.
	for user, want := range map[string]string{"u1": "Too many buckets: 3 (limit of 2)", "u2": "Too many parameter query results (limit of 2)"} {
		ls := e.open(token(t, user, nil), nil).end()
		last := ls[len(ls)-1]
		if last.Error == nil || last.Error.Code != codeTooManyBuckets || !strings.HasPrefix(last.Error.Message, want) {
			t.Fatalf("%s: lines %v, last %s; want a %s error %q…", user, kinds(ls), last.Raw, codeTooManyBuckets, want)
		}
		if slices.Contains(kinds(ls), "data") || slices.Contains(kinds(ls), "checkpoint") {
			t.Fatalf("%s: data sent despite the limit: %v", user, kinds(ls))
		}
	}
}

func TestGzip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("todos", "t1", "a", strings.Repeat("compressible ", 50)))
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(e.ctx)
	resp := e.request(ctx, token(t, "u1", nil), map[string]any{"raw_data": true},
		http.Header{"Accept-Encoding": {"br;q=1.0, gzip;q=0.8"}}, client)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("HTTP %d, headers %v", resp.StatusCode, resp.Header)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := readStream(t, resp, zr, cancel)
	defer s.close()
	// The stream stays open: the whole checkpoint arriving proves every
	// line is flushed through the compressor.
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...)
	if c.rows[e.b("by_list", "a")]["todos/t1"] == "" {
		t.Fatalf("rows %v", c.rows)
	}
}

func TestLegacyObjectData(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	e.commit(e.upsert("lists", "a", "A", "u1"))
	ls := e.open(token(t, "u1", nil), map[string]any{"raw_data": false}).untilComplete()
	var obj map[string]string
	if err := json.Unmarshal(ls[1].Data.Data[0].Data, &obj); err != nil || obj["name"] != "A" {
		t.Fatalf("data %s: want a nested object (%v)", ls[1].Raw, err)
	}
}

func TestGroupSwitch(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, groupSwitch)
}

func groupSwitch(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "A", "u1"))
	s := e.open(token(t, "u1", nil), nil)
	c := newClient(t)
	c.apply(s.untilComplete()...)

	// A new rules version replicates and takes over.
	next := e.newGroup(`
bucket_definitions:
  mine:
    parameters: SELECT request.user_id() AS owner
    data:
      - SELECT id, name FROM lists WHERE owner_id = bucket.owner
`)
	ls := s.untilComplete()
	c.apply(ls...)
	d := ls[0].CheckpointDiff
	mine := fmt.Sprintf(`%d#mine["u1"]`, next.ID)
	if d == nil || len(d.Updated) != 1 || d.Updated[0].Bucket != mine || len(d.Removed) != 2 {
		t.Fatalf("diff %s, want %s updated and the old group's 2 buckets removed", ls[0].Raw, mine)
	}
	if c.rows[mine]["lists/a"] == "" {
		t.Fatalf("rows %v", c.rows)
	}
}

// newGroup deploys rules as a new group holding list a of u1 and publishes
// its first checkpoint, which makes it ACTIVE.
func (e *env) newGroup(rules string) bucketstore.Group {
	t := e.t
	t.Helper()
	g, err := e.store.Catalog().CreateGroup(e.ctx, rules, "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, ctx: e.ctx, store: e.store, group: g, lsn: e.lsn}
	parsed, err := syncrules.Parse([]byte(rules), syncrules.Options{GroupID: strconv.Itoa(g.ID)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.store.Catalog().RegisterTable(e.ctx, g.ID, 2001, "public", "lists", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Catalog().MarkTableSnapshotDone(e.ctx, st.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Catalog().MarkSnapshotDone(e.ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	bound, err := parsed.Bind("lists", todoTables["lists"])
	if err != nil {
		t.Fatal(err)
	}
	e2.tables = map[string]*testTable{"lists": {table: &st.Table, bound: bound, ev: bound.NewEvaluator()}}
	w, err := e.store.Writes().NewWriter(e.ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e2.w = w
	e2.commit(e2.upsert("lists", "a", "A", "u1"))
	e.lsn = e2.lsn
	return g
}

// httpRecord serves one request through srv's handler in-process.
func httpRecord(srv *Server, method, target, auth, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req, _ := http.NewRequestWithContext(context.Background(), method, target, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	srv.Handler().ServeHTTP(rec, req)
	return rec
}

func TestTokenAndClientParameters(t *testing.T) {
	t.Parallel()
	onBoth(t, `
bucket_definitions:
  team:
    parameters: SELECT token_parameters.team AS team
    data:
      - SELECT id, name FROM lists WHERE owner_id = bucket.team
  picked:
    parameters: SELECT request.parameters() ->> 'list' AS list_id
    data:
      - SELECT id, name FROM lists WHERE id = bucket.list_id
`, map[string][]string{"lists": {"id", "name", "owner_id"}}, nil, tokenAndClientParameters)
}

func tokenAndClientParameters(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "A", "red"), e.upsert("lists", "b", "B", "blue"), e.upsert("lists", "c", "C", "blue"))
	tok := token(t, "u1", func(c jwt.MapClaims) { c["parameters"] = map[string]any{"team": "red"} })
	ls := e.open(tok, map[string]any{"parameters": map[string]any{"list": "b"}}).untilComplete()
	c := newClient(t)
	c.apply(ls...)
	team, picked := e.b("team", "red"), e.b("picked", "b")
	if len(c.target) != 2 || c.rows[team]["lists/a"] == "" || c.rows[picked]["lists/b"] == "" {
		t.Fatalf("buckets %v rows %v, want %s with a and %s with b", c.target, c.rows, team, picked)
	}
}

// TestUnaffectedCheckpointsSendNothing: checkpoints that touch none of a
// stream's buckets send it nothing (the stream takes them as evaluated
// without preparing them, conn.unaffected), and its next change after
// them arrives as a diff of that bucket alone whose checksum is the one a
// new stream evaluates from scratch.
func TestUnaffectedCheckpointsSendNothing(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, unaffectedCheckpointsSendNothing)
}

func unaffectedCheckpointsSendNothing(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u2"))
	tok := token(t, "u1", nil)
	s := e.open(tok, map[string]any{})
	s.untilComplete()
	for i := range 5 {
		e.commit(e.upsert("todos", fmt.Sprintf("t%d", i), "b", "theirs"))
	}
	cp := e.commit(e.upsert("todos", "mine", "a", "mine"))
	ls := s.untilComplete()
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "data", "checkpoint_complete"}) {
		t.Fatalf("lines %v, want one diff, its data and the completion", got)
	}
	d := ls[0].CheckpointDiff
	if d.LastOpID != opID(cp.OpID) || len(d.Updated) != 1 || !strings.HasSuffix(d.Updated[0].Bucket, `by_list["a"]`) || len(d.Removed) != 0 {
		t.Fatalf("diff %s, want by_list[\"a\"] alone at %d", ls[0].Raw, cp.OpID)
	}
	fresh := e.open(tok, map[string]any{}).untilComplete()
	for _, b := range fresh[0].Checkpoint.Buckets {
		if b.Bucket == d.Updated[0].Bucket && (b.Checksum != d.Updated[0].Checksum || b.Count != d.Updated[0].Count) {
			t.Fatalf("diff says %+v, a new stream %+v", d.Updated[0], b)
		}
	}
}
