package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRunServesStreams: `syncpipe run` on a Sync Streams config (the
// demo's, todos.StreamRules) replicates
// the streams' tables and serves a sync request's subscriptions: the
// checkpoint lists the connection's streams and each bucket's
// subscriptions, and the data lines hold the user's lists (the default
// stream) and the subscribed list's todos — with priority 1 from the
// subscription's override; a subscription to a stream the rules do not
// define is listed with an error, and the rest is served; with defaults
// off, only the subscription's bucket.
func TestRunServesStreams(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: todos.StreamRules, Data: &todos.Size{Lists: 10, Todos: 200, Seed: 4}})
	e.Start()
	e.WaitCaughtUp(ctx)
	list, listTodos, userLists := user1List(t, ctx, e)
	body := fmt.Sprintf(`{"raw_data":true,"streams":{"include_defaults":true,"subscriptions":[{"stream":"list_todos","parameters":{"list_id":%q},"override_priority":1},
		{"stream":"nope","parameters":null,"override_priority":null}]}}`, list)
	s := harness.OpenStream(t, ctx, e.API, e.Token("user1"), body)
	var cp struct {
		Checkpoint struct {
			Buckets []struct {
				Bucket        string           `json:"bucket"`
				Priority      int              `json:"priority"`
				Count         int              `json:"count"`
				Subscriptions []map[string]int `json:"subscriptions"`
			} `json:"buckets"`
			Streams []struct {
				Name      string            `json:"name"`
				IsDefault bool              `json:"is_default"`
				Errors    []json.RawMessage `json:"errors"`
			} `json:"streams"`
		} `json:"checkpoint"`
	}
	rows := map[string]int{} // object type → PUTs received
	if err := json.Unmarshal([]byte(syncUntilComplete(t, ctx, s, countPuts(rows))), &cp); err != nil {
		t.Fatal(err)
	}
	c := cp.Checkpoint
	if len(c.Streams) != 3 || c.Streams[0].Name != "my_lists" || !c.Streams[0].IsDefault || c.Streams[1].Name != "list_todos" || c.Streams[1].IsDefault ||
		len(c.Streams[0].Errors)+len(c.Streams[1].Errors) != 0 || c.Streams[2].Name != "nope" || len(c.Streams[2].Errors) != 1 ||
		!strings.Contains(string(c.Streams[2].Errors[0]), `{"subscription":1,"message":"unknown stream \"nope\"`) {
		t.Errorf("checkpoint streams: %+v, want my_lists (default), list_todos, and nope with an error on subscription 1", c.Streams)
	}
	want := map[string]string{"1#my_lists|0[\"user1\"]": `[{"default":0}] priority 3`, "1#list_todos|0[\"" + list + "\"]": `[{"sub":0}] priority 1`}
	if len(c.Buckets) != len(want) {
		t.Errorf("checkpoint buckets: %+v, want %v", c.Buckets, want)
	}
	for _, b := range c.Buckets {
		subs, _ := json.Marshal(b.Subscriptions)
		if got := fmt.Sprintf("%s priority %d", subs, b.Priority); want[b.Bucket] != got {
			t.Errorf("bucket %s: %s, want %s", b.Bucket, got, want[b.Bucket])
		}
	}
	if rows["lists"] != userLists || rows["todos"] != listTodos {
		t.Errorf("data: %v, want %d lists and %d todos", rows, userLists, listTodos)
	}

	// Defaults off: the subscription's bucket alone.
	body = fmt.Sprintf(`{"raw_data":true,"streams":{"include_defaults":false,"subscriptions":[{"stream":"list_todos","parameters":{"list_id":%q}}]}}`, list)
	s = harness.OpenStream(t, ctx, e.API, e.Token("user1"), body)
	for {
		l, open := <-s.Lines
		if !open {
			t.Fatal("the stream ended before its checkpoint")
		}
		if strings.HasPrefix(l, `{"checkpoint":`) {
			if !strings.Contains(l, `"buckets":[{"bucket":"1#list_todos|0[\"`+list+`\"]"`) || strings.Contains(l, "my_lists|0") ||
				!strings.Contains(l, `"streams":[{"name":"list_todos","is_default":false,"errors":[]}]`) {
				t.Errorf("defaults off: %s, want list_todos' bucket and stream only", l)
			}
			break
		}
	}
}

// TestRunServesCheckpointRequests: `syncpipe run`'s API stores a write
// checkpoint the client numbered (POST /sync/checkpoint-request), answers
// the larger of the stored and requested ids, and a stream of that client
// reports it once replication passed the source position of the request.
func TestRunServesCheckpointRequests(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: todos.StreamRules, Data: &todos.Size{Lists: 3, Todos: 20, Seed: 6}})
	e.Start()
	e.WaitCaughtUp(ctx)
	tok := e.Token("user1")
	post := func(body string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.API+"/sync/checkpoint-request", strings.NewReader(body))
		req.Header.Set("Authorization", "Token "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("checkpoint request %s: HTTP %d %s", body, resp.StatusCode, b)
		}
		return strings.TrimSpace(string(b))
	}
	want := `{"data":{"checkpoint_request_id":"7","write_checkpoint":"7"}}`
	if got := post(`{"client_id":"c1","checkpoint_request_id":"7"}`); got != want {
		t.Fatalf("request 7: %s, want %s", got, want)
	}
	if got := post(`{"client_id":"c1","checkpoint_request_id":"3"}`); got != want {
		t.Fatalf("request 3 after 7: %s, want %s", got, want)
	}
	e.Exec(ctx, "UPDATE lists SET name = 'after the request' WHERE owner_id = 'user1'")
	s := harness.OpenStream(t, ctx, e.API, tok, `{"raw_data":true,"client_id":"c1"}`)
	if !s.Until(t, ctx, `"write_checkpoint":"7"`) {
		t.Fatal("the stream ended before reporting write checkpoint 7")
	}
}

// limitStreamRules are the todos as Sync Streams whose bucket count a
// request steers: a user's lists by default, and the todos of the lists a
// subscription names (a bucket per element of its ids).
const limitStreamRules = `config:
  edition: 3
streams:
  my_lists:
    auto_subscribe: true
    query: SELECT * FROM lists WHERE owner_id = auth.user_id()
  picked:
    accept_potentially_dangerous_queries: true
    query: SELECT * FROM todos WHERE list_id IN subscription.parameter('ids')
  owned_todos:
    query: SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
`

// TestRunStreamsBucketLimit: `syncpipe run` with Sync Streams and
// max_buckets_per_connection 3. A request whose subscription would take
// the connection to 4 buckets fails as a whole with PSYNC_S2305 "Too many
// buckets: 4 (limit of 3)" and no checkpoint, as PowerSync's service
// fails it (BucketChecksumState): the error is not put in that
// subscription's streams[].errors, and the other streams are not served
// without it. Within the limit, a subscription with bad parameters and
// one to an undefined stream get their errors in streams[].errors and
// the rest is served. With max_parameter_query_results 1, a subscription
// whose subquery matches two stored rows (user1's two lists) fails the
// connection with "Too many parameter query results (limit of 1)", though
// its two buckets are within max_buckets_per_connection.
func TestRunStreamsBucketLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: limitStreamRules, API: "max_buckets_per_connection: 3\nmax_parameter_query_results: 1",
		Data: &todos.Size{Lists: 12, Todos: 120, Seed: 5}})
	e.Exec(ctx, "INSERT INTO lists (id, name, owner_id) VALUES (gen_random_uuid(), 'second', 'user1')")
	e.Start()
	e.WaitCaughtUp(ctx)
	var ids []string
	var picked int // todos of the first two lists
	if err := e.Src.QueryRow(ctx, `SELECT array_agg(id::text ORDER BY id), (SELECT count(*) FROM todos WHERE list_id IN
		(SELECT id FROM lists ORDER BY id LIMIT 2)) FROM (SELECT id FROM lists ORDER BY id LIMIT 3) l`).Scan(&ids, &picked); err != nil {
		t.Fatal(err)
	}
	idsJSON, _ := json.Marshal(ids)
	over := fmt.Sprintf(`{"raw_data":true,"streams":{"include_defaults":true,"subscriptions":[{"stream":"picked","parameters":{"ids":%s}}]}}`, idsJSON)
	s := harness.OpenStream(t, ctx, e.API, e.Token("user1"), over)
	if first := firstLine(t, s); !strings.HasPrefix(first, `{"error":{"code":"PSYNC_S2305","message":"Too many buckets: 4 (limit of 3)`) {
		t.Fatalf("over the limit: first line %.300s, want PSYNC_S2305 \"Too many buckets: 4 (limit of 3)…\"", first)
	}
	if l, open := <-s.Lines; open {
		t.Fatalf("over the limit: line %.200s after the error, want the end of the stream", l)
	}

	idsJSON, _ = json.Marshal(ids[:2])
	within := fmt.Sprintf(`{"raw_data":true,"streams":{"include_defaults":true,"subscriptions":[{"stream":"picked","parameters":{"ids":%s}},
		{"stream":"picked","parameters":{"ids":5}},{"stream":"nope","parameters":null}]}}`, idsJSON)
	withinRows := map[string]int{}
	cp := syncUntilComplete(t, ctx, harness.OpenStream(t, ctx, e.API, e.Token("user1"), within), countPuts(withinRows))
	todoRows := withinRows["todos"]
	for _, want := range []string{`"streams":[{"name":"my_lists","is_default":true,"errors":[]},{"name":"picked","is_default":false,` +
		`"errors":[{"subscription":1,"message":"Error evaluating bucket ids: `, `{"name":"nope","is_default":false,"errors":[{"subscription":2,"message":"unknown stream \"nope\"`} {
		if !strings.Contains(cp, want) {
			t.Errorf("within the limit: checkpoint %s, want it to hold %s", cp, want)
		}
	}
	if n := strings.Count(cp, `{"bucket":`); n != 3 || todoRows != picked || picked == 0 {
		t.Errorf("within the limit: %d buckets, %d todos; want 3 and %d", n, todoRows, picked)
	}

	owned := `{"raw_data":true,"streams":{"include_defaults":false,"subscriptions":[{"stream":"owned_todos","parameters":null}]}}`
	s = harness.OpenStream(t, ctx, e.API, e.Token("user1"), owned)
	if first := firstLine(t, s); !strings.HasPrefix(first, `{"error":{"code":"PSYNC_S2305","message":"Too many parameter query results (limit of 1)`) {
		t.Fatalf("over the parameter limit: first line %.300s, want PSYNC_S2305 \"Too many parameter query results (limit of 1)…\"", first)
	}
}
