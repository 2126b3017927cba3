package clienttest

import (
	"context"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// priorityRules are todos.Rules with the lists at priority 1: they sync,
// and are complete (partial_checkpoint_complete), before the todos.
const priorityRules = `bucket_definitions:
  global:
    priority: 1
    data:
      - SELECT * FROM lists
  by_list:
    parameters: SELECT id AS list_id FROM lists
    data:
      - SELECT * FROM todos WHERE list_id = bucket.list_id
`

// TestRealClientPrioritiesAndExpiry, over both transports: the SDK sees
// priority 1 synced while the first sync is not (a
// partial_checkpoint_complete reached it); then its token expires during
// the stream — the server sends token_expires_in 0 and ends the stream at
// exp, the SDK fetches credentials and reconnects with the token its
// connector hands out by then — and changes keep converging, with no SDK
// warning or sync error throughout.
//
// The keepalive lines are spaced beyond the token's life: told 30 s or
// less remain, the SDK itself fetches a new token and reconnects before
// expiry (what it does with the default 20 s lines), and the server's end
// of the stream at exp would not be reached.
func TestRealClientPrioritiesAndExpiry(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	requireClient(t)
	onBothTransports(t, realClientPrioritiesAndExpiry)
}

func realClientPrioritiesAndExpiry(t *testing.T, method string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStackRules(t, ctx, todos.Size{Lists: 20, Todos: 20000, Seed: 5}, priorityRules, 10*time.Minute)
	// Over 30 s, so that the first line (token_expires_in) does not make
	// the SDK fetch a new token at once.
	const life = 35 * time.Second
	exp := time.Now().Add(life)
	c := startClient(t, s.endpoint, mintToken(t, "user1", life),
		append(connect(method), "--report-priority", "1", "--report-connection")...)
	if ev := c.expect("priority_synced", 3*time.Minute); ev.HasSynced == nil || *ev.HasSynced {
		t.Fatalf("%s: want priority 1 synced before the first sync completed", ev.raw)
	}
	ev := c.expect("first_sync", 3*time.Minute)
	if want := s.count(t, ctx, "SELECT count(*) FROM todos"); ev.Todos == nil || *ev.Todos != want {
		t.Fatalf("first sync %s, want %d todos", ev.raw, want)
	}
	c.send(map[string]any{"cmd": "set_token", "token": mintToken(t, "user1", 30*time.Minute)})
	c.expect("token_set", time.Minute)

	// The stream ends at exp and the SDK connects again.
	if ev := c.expect("connection", life+time.Minute); ev.Connected == nil || *ev.Connected {
		t.Fatalf("%s: want the stream to end at the token's expiry", ev.raw)
	}
	if now := time.Now(); now.Before(exp.Add(-time.Second)) {
		t.Fatalf("disconnected %s before the token's expiry", exp.Sub(now))
	}
	if ev := c.expect("connection", time.Minute); ev.Connected == nil || !*ev.Connected {
		t.Fatalf("%s: want the SDK connected again", ev.raw)
	}
	s.exec(t, ctx, `INSERT INTO todos (id, list_id, description) SELECT gen_random_uuid(), id, 'after expiry' FROM lists ORDER BY id LIMIT 3`)
	c.send(map[string]any{"cmd": "wait", "sql": "SELECT count(*) FROM todos WHERE description = 'after expiry'", "n": 3, "timeout_ms": 60000})
	if ev := c.expect("count", 90*time.Second); ev.N == nil || *ev.N != 3 {
		t.Fatalf("after the expiry: %s, want the 3 new todos", ev.raw)
	}
	sameTodos(t, c.todos(), s.sourceTodos(t, ctx))
	c.exit()
}
