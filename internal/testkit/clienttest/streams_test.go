package clienttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestRealClientStreams: the unmodified SDK on Sync Streams (the demo's,
// todos.StreamRules). Its first
// sync brings the auto-subscribed stream only (the user's lists, no
// todos); db.syncStream('list_todos', {list_id}).subscribe() brings that
// list's todos — waitForFirstSync resolves, so the checkpoint lines'
// streams and subscriptions are what the client expects; changes to the
// list converge; unsubscribeAll() removes them again, and so does
// unsubscribe() once the subscription's TTL expired. The SDK validates
// every checksum throughout (a mismatch fails the driver).
func TestRealClientStreams(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	requireClient(t)
	onBothTransports(t, realClientStreams)
}

func realClientStreams(t *testing.T, method string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Keepalives every second: the client drops expired subscriptions
	// when one arrives.
	// 120 lists: user3 owns two of them (todos.Load gives list i to user i%100).
	s := startStackRules(t, ctx, todos.Size{Lists: 120, Todos: 600, Seed: 2}, todos.StreamRules, time.Second)

	c := startClient(t, s.endpoint, mintToken(t, "user3", 30*time.Minute), connect(method)...)
	ev := c.expect("first_sync", 3*time.Minute)
	wantLists := s.count(t, ctx, "SELECT count(*) FROM lists WHERE owner_id = 'user3'")
	if ev.Lists == nil || ev.Todos == nil || *ev.Lists != wantLists || wantLists == 0 || *ev.Todos != 0 {
		t.Fatalf("first sync: %s, want %d lists (the user's) and no todos", ev.raw, wantLists)
	}
	// A list of the user's (list_todos checks ownership).
	var list string
	if err := s.src.QueryRow(ctx, `SELECT id::text FROM lists WHERE owner_id = 'user3' ORDER BY id LIMIT 1`).Scan(&list); err != nil {
		t.Fatal(err)
	}
	inList := "SELECT count(*) FROM todos WHERE list_id = '" + list + "'"
	waitN := func(step, q string, want int) {
		t.Helper()
		c.send(map[string]any{"cmd": "wait", "sql": q, "n": want, "timeout_ms": 60000})
		if ev := c.expect("count", 90*time.Second); ev.N == nil || *ev.N != want {
			t.Fatalf("%s: %s, want %d", step, ev.raw, want)
		}
	}
	params := map[string]any{"list_id": list}
	c.send(map[string]any{"cmd": "subscribe", "stream": "list_todos", "params": params})
	c.expect("subscribed", 90*time.Second)
	waitN("subscribed", "SELECT count(*) FROM todos", s.count(t, ctx, inList))

	s.exec(t, ctx, `INSERT INTO todos (id, list_id, description) SELECT gen_random_uuid(), '`+list+`', 'new #' || g FROM generate_series(1, 5) g`)
	s.exec(t, ctx, `UPDATE todos SET description = 'updated' WHERE id IN (SELECT id FROM todos WHERE list_id = '`+list+`' ORDER BY id LIMIT 3)`)
	s.exec(t, ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos WHERE list_id = '`+list+`' ORDER BY id DESC LIMIT 2)`)
	waitN("changes", "SELECT count(*) FROM todos", s.count(t, ctx, inList))
	waitN("updates", "SELECT count(*) FROM todos WHERE description = 'updated'", 3)
	sameTodos(t, c.todos(), s.sourceTodosWhere(t, ctx, "list_id = '"+list+"'"))

	c.send(map[string]any{"cmd": "unsubscribe_all", "stream": "list_todos", "params": params})
	c.expect("unsubscribed", 90*time.Second)
	waitN("unsubscribed", "SELECT count(*) FROM todos", 0)
	waitN("lists kept", "SELECT count(*) FROM lists", wantLists)

	// unsubscribe() with a TTL: the todos stay until it expires, then go.
	var other string
	if err := s.src.QueryRow(ctx, `SELECT id::text FROM lists WHERE owner_id = 'user3' AND id::text <> $1 ORDER BY id LIMIT 1`, list).Scan(&other); err != nil {
		t.Fatal(err)
	}
	params = map[string]any{"list_id": other}
	c.send(map[string]any{"cmd": "subscribe", "stream": "list_todos", "params": params, "ttl": 2})
	c.expect("subscribed", 90*time.Second)
	waitN("subscribed with a TTL", "SELECT count(*) FROM todos", s.count(t, ctx, "SELECT count(*) FROM todos WHERE list_id = '"+other+"'"))
	c.send(map[string]any{"cmd": "unsubscribe", "stream": "list_todos", "params": params})
	c.expect("unsubscribed", 90*time.Second)
	waitN("TTL expired", "SELECT count(*) FROM todos", 0)
	c.exit()
}

// TestRealClientCheckpointRequests: the SDK in checkpoint_mode "requests"
// posts its own checkpoint ids to /sync/checkpoint-request;
// db.requestCheckpoint().waitForSync() resolves only once a checkpoint
// line reports that id as its write checkpoint, after replication passed
// the source position of the request — here after a change made just
// before it, which the client then has.
func TestRealClientCheckpointRequests(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	requireClient(t)
	onBothTransports(t, realClientCheckpointRequests)
}

func realClientCheckpointRequests(t *testing.T, method string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStackRules(t, ctx, todos.Size{Lists: 5, Todos: 50, Seed: 3}, todos.StreamRules, 0)
	c := startClient(t, s.endpoint, mintToken(t, "user1", 30*time.Minute), append(connect(method), "--checkpoint-mode", "requests")...)
	c.expect("first_sync", 3*time.Minute)
	for i := range 3 {
		s.exec(t, ctx, fmt.Sprintf(`UPDATE lists SET name = 'renamed %d' WHERE owner_id = 'user1'`, i))
		c.send(map[string]any{"cmd": "request_checkpoint"})
		c.expect("checkpoint_synced", 90*time.Second)
		c.send(map[string]any{"cmd": "query", "sql": "SELECT DISTINCT name FROM lists"})
		if ev := c.expect("rows", time.Minute); len(ev.Rows) != 1 || ev.Rows[0]["name"] != fmt.Sprintf("renamed %d", i) {
			t.Fatalf("request %d: the client's lists %s, want all renamed %d once the checkpoint request synced", i, ev.raw, i)
		}
	}
	var n int
	if err := s.store.Pool().QueryRow(ctx, `SELECT write_checkpoint FROM write_checkpoints WHERE user_id LIKE 'user1/%'`).Scan(&n); err != nil || n < 3 {
		t.Fatalf("stored checkpoint request id %d (%v), want ≥ 3", n, err)
	}
	c.exit()
}
