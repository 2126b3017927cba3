package syncapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// limitStreamRules are Sync Streams whose bucket count a test steers: a
// user's lists and their todos by default (one lookup), and todos of the
// lists a subscription names (a bucket per element of its ids).
const limitStreamRules = `
config:
  edition: 3
streams:
  my_lists:
    auto_subscribe: true
    query: SELECT id, name FROM lists WHERE owner_id = auth.user_id()
  my_todos:
    auto_subscribe: true
    query: SELECT id, list_id, description FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
  picked:
    accept_potentially_dangerous_queries: true
    query: SELECT id, description FROM todos WHERE list_id IN subscription.parameter('ids')
`

// streamsJSON is what a full checkpoint line says of the connection's
// streams.
type streamsJSON struct {
	Checkpoint struct {
		Streams []struct {
			Name      string `json:"name"`
			IsDefault bool   `json:"is_default"`
			Errors    []struct {
				Subscription any    `json:"subscription"`
				Message      string `json:"message"`
			} `json:"errors"`
		} `json:"streams"`
	} `json:"checkpoint"`
}

// subscribe is a request body with these subscriptions (JSON objects),
// defaults included.
func subscribe(subs ...string) map[string]any {
	raw := make([]json.RawMessage, len(subs))
	for i, s := range subs {
		raw[i] = json.RawMessage(s)
	}
	return map[string]any{"streams": map[string]any{"include_defaults": true, "subscriptions": raw}}
}

// forEachEncoding runs test as a subtest per line encoding: NDJSON, then
// BSON.
func forEachEncoding(t *testing.T, test func(t *testing.T, bsonLines bool)) {
	for _, enc := range []string{"ndjson", "bson"} {
		t.Run(enc, func(t *testing.T) { test(t, enc == "bson") })
	}
}

// openEncoded opens a stream in NDJSON or, as the SDKs ask, in BSON.
func openEncoded(e *fakeEnv, tok string, body map[string]any, bsonLines bool) *stream {
	e.t.Helper()
	if !bsonLines {
		return e.open(tok, body)
	}
	accept := "application/vnd.powersync.bson-stream;q=0.9,application/x-ndjson;q=0.8"
	return e.openWith(tok, body, http.Header{"Accept": {accept}}, bsonType)
}

// TestStreamsTooManyBuckets: with Sync Streams, max_buckets_per_connection
// bounds the connection's distinct buckets over all its subscriptions and
// default streams. Past it the connection fails with PSYNC_S2305 before
// any checkpoint, as PowerSync's BucketChecksumState does ("Too many
// buckets: n (limit of m)"); no subscription gets the error in
// streams[].errors. Within it, a subscription whose parameters cannot be
// evaluated gets its error there (and no bucket), so does one to a stream
// the rules do not define (syncpipe's addition), and the rest is served.
// In NDJSON and BSON alike.
func TestStreamsTooManyBuckets(t *testing.T) {
	t.Parallel()
	forEachEncoding(t, func(t *testing.T, bsonLines bool) {
		e := newFakeEnv(t, limitStreamRules, todoTables, func(c *Config) { c.MaxBucketsPerConnection = 4 })
		e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("todos", "t1", "x", "in x"))
		tok := token(t, "u1", nil)

		// my_lists, my_todos["a"], picked["x"], picked["y"]: at the limit.
		ls := openEncoded(e, tok, subscribe(`{"stream":"picked","parameters":{"ids":["x","y"]}}`,
			`{"stream":"picked","parameters":{"ids":5}}`, `{"stream":"nope","parameters":null}`), bsonLines).untilComplete()
		if got := kinds(ls); len(ls) < 2 || got[0] != "checkpoint" || got[len(got)-1] != "checkpoint_complete" {
			t.Fatalf("at the limit: lines %v, want a checkpoint then its data and completion", got)
		}
		if names := bucketNames(ls[0].Checkpoint.Buckets); len(names) != 4 || !slices.Contains(names, `7#picked|0["y"]`) {
			t.Errorf("at the limit: buckets %v, want 4 with picked's", names)
		}
		var cp streamsJSON
		if err := json.Unmarshal([]byte(ls[0].Raw), &cp); err != nil {
			t.Fatal(err)
		}
		st := cp.Checkpoint.Streams
		if len(st) != 4 || st[2].Name != "picked" || len(st[0].Errors)+len(st[1].Errors) != 0 || len(st[2].Errors) != 1 ||
			st[2].Errors[0].Subscription != 1.0 || !strings.HasPrefix(st[2].Errors[0].Message, "Error evaluating bucket ids: ") ||
			st[3].Name != "nope" || len(st[3].Errors) != 1 || st[3].Errors[0].Subscription != 2.0 ||
			!strings.HasPrefix(st[3].Errors[0].Message, `unknown stream "nope"`) {
			t.Errorf("at the limit: streams %+v, want my_lists, my_todos, picked with an error on subscription 1, nope with one on 2", st)
		}

		// One bucket more: the connection fails, whichever subscription
		// brought it.
		ls = openEncoded(e, tok, subscribe(`{"stream":"picked","parameters":{"ids":["x","y","z"]}}`,
			`{"stream":"picked","parameters":{"ids":5}}`), bsonLines).end()
		if len(ls) == 0 || ls[len(ls)-1].Error == nil {
			t.Fatalf("over the limit: lines %v, want an error line last", kinds(ls))
		}
		last := ls[len(ls)-1].Error
		if last.Code != codeTooManyBuckets || !strings.HasPrefix(last.Message, "Too many buckets: 5 (limit of 4)") {
			t.Errorf("over the limit: error %+v, want %s \"Too many buckets: 5 (limit of 4)…\"", last, codeTooManyBuckets)
		}
		if got := kinds(ls); slices.ContainsFunc(got, func(k string) bool { return k != "token_expires_in" && k != "error" }) {
			t.Errorf("over the limit: lines %v, want no checkpoint and no data", got)
		}
	})
}

// TestStreamsTooManyBucketsLater: a connection within the limit that a
// replicated change takes past it (a new list brings a my_todos bucket)
// ends with PSYNC_S2305 instead of a checkpoint_diff, as PowerSync ends
// it at whichever checkpoint goes over.
func TestStreamsTooManyBucketsLater(t *testing.T) {
	t.Parallel()
	forEachEncoding(t, func(t *testing.T, bsonLines bool) {
		e := newFakeEnv(t, limitStreamRules, todoTables, func(c *Config) { c.MaxBucketsPerConnection = 3 })
		e.commit(e.upsert("lists", "a", "A", "u1"))
		s := openEncoded(e, token(t, "u1", nil), subscribe(`{"stream":"picked","parameters":{"ids":["x"]}}`), bsonLines)
		if ls := s.untilComplete(); ls[0].Checkpoint == nil || len(ls[0].Checkpoint.Buckets) != 3 {
			t.Fatalf("first lines %v, want a checkpoint of 3 buckets completed", kinds(ls))
		}
		e.commit(e.upsert("lists", "b", "B", "u1"))
		ls := s.end()
		if len(ls) == 0 || ls[len(ls)-1].Error == nil || ls[len(ls)-1].Error.Code != codeTooManyBuckets ||
			!strings.HasPrefix(ls[len(ls)-1].Error.Message, "Too many buckets: 4 (limit of 3)") {
			t.Fatalf("then lines %v, want a %s error \"Too many buckets: 4 (limit of 3)…\" last", kinds(ls), codeTooManyBuckets)
		}
		if slices.Contains(kinds(ls), "checkpoint_diff") {
			t.Errorf("then lines %v, want no checkpoint_diff", kinds(ls))
		}
	})
}

// TestStreamsTooManyParameterResults: the parameter rows a connection's
// stream lookups match are bounded too, by max_parameter_query_results
// (PowerSync's, also 1000 by default), and past it the connection fails
// with PSYNC_S2305 "Too many parameter query results" — even within
// max_buckets_per_connection.
func TestStreamsTooManyParameterResults(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, limitStreamRules, todoTables, func(c *Config) { c.MaxBucketsPerConnection, c.MaxParameterQueryResults = 10, 2 })
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"), e.upsert("lists", "c", "C", "u1"))
	ls := e.open(token(t, "u1", nil), subscribe()).end()
	if len(ls) == 0 || ls[len(ls)-1].Error == nil || ls[len(ls)-1].Error.Code != codeTooManyBuckets ||
		!strings.HasPrefix(ls[len(ls)-1].Error.Message, "Too many parameter query results (limit of 2)") {
		t.Fatalf("lines %v, want a %s error \"Too many parameter query results (limit of 2)…\" last", kinds(ls), codeTooManyBuckets)
	}
	if slices.Contains(kinds(ls), "checkpoint") {
		t.Errorf("lines %v, want no checkpoint", kinds(ls))
	}
}
