package syncapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// What the server sends when bucket storage fails. The fake fails on
// demand (fakeStore.fail), which a real database does not; these tests
// need no PostgreSQL.

// TestStorageFailureEndsStream: a storage read failing while a stream
// prepares or sends its first checkpoint ends the stream with an error
// line and completes no checkpoint: PSYNC_S2301 asking the client to
// reconnect, without storage's error text; a group that cannot be read
// is PSYNC_S2302 (no usable sync rules). Once storage answers again, a
// new stream syncs in full.
func TestStorageFailureEndsStream(t *testing.T) {
	t.Parallel()
	for method, code := range map[string]string{"Group": codeNoRules, "ParameterRows": codeInternal,
		"Checksums": codeInternal, "ReadBucketDataShape": codeInternal, "ReadValidity": codeInternal} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, todoRules, todoTables, nil)
			cp := e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("todos", "t1", "a", "one"))
			e.fake.fail(method, errors.New("storage down: secret detail"))
			ls := e.open(token(t, "u1", nil), nil).end()
			checkFailedStream(t, ls, code)

			e.fake.fail(method, nil)
			c := newClient(t)
			ls = e.open(token(t, "u1", nil), nil).untilComplete()
			c.apply(ls...)
			if c.complete != opID(cp.OpID) || c.ops != 2 {
				t.Fatalf("after storage recovered: completed %q with %d ops, want %d with 2 (list a, todo t1)", c.complete, c.ops, cp.OpID)
			}
		})
	}
}

// TestStorageFailureLater: a stream that completed a checkpoint and
// fails reading the next one ends with the same error line, after no
// line of the failed checkpoint but possibly its diff; the client keeps
// what it completed and resumes from it. The next checkpoint gives the
// client list c, which it did not have, so the stream needs every read:
// its lookups changed (ParameterRows), and the bucket's checksum and its
// older ops are in no checkpoint delta (Checksums, ReadBucketDataShape,
// then ReadValidity).
func TestStorageFailureLater(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"ParameterRows", "Checksums", "ReadBucketDataShape", "ReadValidity"} {
		t.Run(method, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, todoRules, todoTables, nil)
			e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("todos", "t1", "a", "one"),
				e.upsert("lists", "c", "C", "u2"), e.upsert("todos", "tc", "c", "in c"))
			s := e.open(token(t, "u1", nil), nil)
			c := newClient(t)
			c.apply(s.untilComplete()...)
			done := c.complete

			e.fake.fail(method, errors.New("storage down: secret detail"))
			e.commit(e.upsert("todos", "t2", "a", "two"), e.upsert("lists", "c", "C", "u1"))
			ls := s.end()
			checkFailedStream(t, ls, codeInternal)
			if c.complete != done {
				t.Fatalf("completed %q, want still %q", c.complete, done)
			}

			e.fake.fail(method, nil)
			cp := e.commit(e.upsert("todos", "t3", "a", "three"))
			ls = e.open(token(t, "u1", nil), map[string]any{"buckets": c.positions()}).untilComplete()
			c.apply(ls...)
			if c.complete != opID(cp.OpID) || len(c.rows[e.b("by_list", "a")]) != 3 || c.rows[e.b("by_list", "c")]["todos/tc"] == "" {
				t.Fatalf("resumed: completed %q with rows %v, want %d with t1, t2 and t3 in a, tc in c", c.complete, c.rows, cp.OpID)
			}
		})
	}
}

// checkFailedStream checks that a stream ended with an error line of
// code and completed nothing; an internal error asks the client to
// reconnect and hides storage's error.
func checkFailedStream(t *testing.T, ls []line, code string) {
	t.Helper()
	if len(ls) == 0 {
		t.Fatal("the stream sent nothing")
	}
	last := ls[len(ls)-1]
	if last.Error == nil || last.Error.Code != code {
		t.Fatalf("lines %v, last %s: want an %s error", kinds(ls), last.Raw, code)
	}
	if code == codeInternal && (!strings.Contains(last.Error.Message, "reconnect") || strings.Contains(last.Raw, "secret detail")) {
		t.Fatalf("error line %s: want a request to reconnect without storage's error", last.Raw)
	}
	for _, k := range []string{"checkpoint_complete", "partial_checkpoint_complete"} {
		if slices.Contains(kinds(ls), k) {
			t.Fatalf("lines %v: a checkpoint was completed despite the failure", kinds(ls))
		}
	}
}

// TestWriteCheckpointStorageFailure: when storage cannot keep a write
// checkpoint, GET /write-checkpoint2.json and POST
// /sync/checkpoint-request answer 503 with PSYNC_S2003, not a number
// the client would wait for in vain.
func TestWriteCheckpointStorageFailure(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	e.fake.fail("CreateWriteCheckpoint", errors.New("storage down"))
	e.fake.fail("RequestWriteCheckpoint", errors.New("storage down"))
	tok := token(t, "u1", nil)
	for _, req := range []struct{ method, path, body string }{
		{http.MethodGet, "/write-checkpoint2.json?client_id=c1", ""},
		{http.MethodPost, "/sync/checkpoint-request", `{"client_id":"c1","checkpoint_request_id":"5"}`},
	} {
		rec := httpRecord(e.srv, req.method, req.path, "Bearer "+tok, req.body)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), codeUnavailable) {
			t.Errorf("%s %s: HTTP %d %s, want 503 %s", req.method, req.path, rec.Code, rec.Body, codeUnavailable)
		}
	}
}
