// Package clienttest is syncpipe's real-client end-to-end test: the
// unmodified PowerSync Node.js SDK (@powersync/node, Rust sync client, HTTP
// streaming, its own checksum validation) syncs from a syncpipe sync API
// that serves a replicated PostgreSQL database.
//
// The Node side lives in testdata/client (package.json, lockfile,
// sync.mjs). The test runs `npm ci` there when node_modules is missing or
// was installed from another lockfile (internal/testkit/nodedeps); everything
// comes from the npm registry, including a Node ≥ 22 binary (the `node`
// package) for node:sqlite.
package clienttest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/syncapi"
)

const (
	testSecret   = "clienttest-hs256-secret-0123456789abcdef"
	testAudience = "syncpipe"
)

// stack is a source database, storage, a running replicator and the sync
// API on 127.0.0.1.
type stack struct {
	source, storage string
	src             *pgx.Conn
	store           *bucketstore.Store
	endpoint        string
	metrics         *sdkmetric.ManualReader // the sync API's
}

func startStack(t *testing.T, ctx context.Context, size todos.Size) *stack {
	t.Helper()
	return startStackRules(t, ctx, size, todos.Rules, 0)
}

// startStackRules is startStack with other sync rules and, if > 0, the
// sync API's keepalive interval (token_expires_in lines).
func startStackRules(t *testing.T, ctx context.Context, size todos.Size, rules string, keepalive time.Duration) *stack {
	t.Helper()
	s := &stack{source: pgtest.NewDB(t), storage: pgtest.NewDB(t)}
	s.src = pgtest.Connect(t, s.source)
	if _, err := todos.Load(ctx, s.src, size); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadBytes("clienttest.yaml", fmt.Appendf(nil, `
source: {uri: %q, publication: syncpipe}
storage: {uri: %q}
sync_rules:
  content: |
%s`, s.source, s.storage, indent(rules, "    ")))
	if err != nil {
		t.Fatal(err)
	}
	s.store, err = bucketstore.Open(ctx, bucketstore.Config{URI: s.storage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.store.Close)

	rctx, stopRepl := context.WithCancel(ctx)
	r := replication.New(replication.Options{Config: cfg, Store: s.store})
	replDone := make(chan error, 1)
	go func() { replDone <- r.Run(rctx) }()
	t.Cleanup(func() {
		stopRepl()
		if err := <-replDone; err != nil && rctx.Err() == nil {
			t.Errorf("replicator: %v", err)
		}
	})
	s.waitCheckpoint(t, ctx, replDone)

	srcPool, err := pgxpool.New(ctx, s.source)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srcPool.Close)
	s.metrics = sdkmetric.NewManualReader()
	api, err := syncapi.New(ctx, syncapi.Config{
		Groups: s.store.Catalog(), Store: s.store.Reader(), Sources: s.store.Reader(),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.metrics)),
		Auth: config.Auth{
			Audience:     []string{testAudience},
			HS256Secrets: []string{testSecret},
			MaxLifetime:  time.Hour,
		},
		MaxBucketsPerConnection: 1000,
		KeepaliveInterval:       keepalive,
		SourceLSN: func(ctx context.Context) (pglogrepl.LSN, error) {
			var lsn string
			if err := srcPool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
				return 0, err
			}
			return pglogrepl.ParseLSN(lsn)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		api.Close()
	})
	s.endpoint = "http://" + ln.Addr().String()
	return s
}

// sentBytes returns the sync API's syncpipe_sync_sent_bytes by
// "content type, content encoding, transport".
func (s *stack) sentBytes(t *testing.T, ctx context.Context) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.metrics.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "syncpipe_sync_sent_bytes" || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				ct, _ := p.Attributes.Value("content_type")
				ce, _ := p.Attributes.Value("content_encoding")
				tr, _ := p.Attributes.Value("transport")
				out[ct.AsString()+", "+ce.AsString()+", "+tr.AsString()] += p.Value
			}
		}
	}
	return out
}

// waitCheckpoint blocks until storage published a checkpoint at or beyond
// the source's current WAL position.
func (s *stack) waitCheckpoint(t *testing.T, ctx context.Context, replDone <-chan error) {
	t.Helper()
	var target string
	if err := s.src.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, s.storage)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.store.NotifyChannel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case err := <-replDone:
			t.Fatalf("replicator stopped before the first checkpoint: %v", err)
		default:
		}
		var reached bool
		err := conn.QueryRow(ctx, `SELECT coalesce(max(last_checkpoint_lsn) >= $1::pg_lsn, false) FROM syncpipe.groups WHERE state = 'ACTIVE'`, target).Scan(&reached)
		if err != nil {
			t.Fatal(err)
		}
		if reached {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			t.Fatalf("waiting for a checkpoint past %s: %v", target, ctx.Err())
		}
	}
}

func indent(s, pre string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(pre + line + "\n")
	}
	return b.String()
}

// mintToken signs a token the way `syncpipe token` does.
func mintToken(t *testing.T, sub string, ttl time.Duration) string {
	t.Helper()
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "iat": now.Unix(), "exp": now.Add(ttl).Unix(), "aud": testAudience,
	}).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *stack) count(t *testing.T, ctx context.Context, q string) int {
	t.Helper()
	var n int
	if err := s.src.QueryRow(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (s *stack) exec(t *testing.T, ctx context.Context, q string) {
	t.Helper()
	if _, err := s.src.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// todoRow is the part of a todo compared between source and client.
type todoRow struct {
	id, listID, description string
	completed               int
}

func (s *stack) sourceTodos(t *testing.T, ctx context.Context) []todoRow {
	t.Helper()
	return s.sourceTodosWhere(t, ctx, "true")
}

// sourceTodosWhere is sourceTodos for the todos matching cond (SQL).
func (s *stack) sourceTodosWhere(t *testing.T, ctx context.Context, cond string) []todoRow {
	t.Helper()
	rows, err := s.src.Query(ctx, `SELECT id::text, list_id::text, description, completed::int FROM todos WHERE `+cond+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []todoRow
	for rows.Next() {
		var r todoRow
		if err := rows.Scan(&r.id, &r.listID, &r.description, &r.completed); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *client) todos() []todoRow {
	c.t.Helper()
	c.send(map[string]any{"cmd": "query", "sql": "SELECT id, list_id, description, completed, created_at FROM todos"})
	ev := c.expect("rows", time.Minute)
	out := make([]todoRow, 0, len(ev.Rows))
	for _, r := range ev.Rows {
		str := func(k string) string { v, _ := r[k].(string); return v }
		if str("created_at") == "" {
			c.t.Fatalf("client todo without created_at: %v", r)
		}
		n, _ := r["completed"].(float64)
		out = append(out, todoRow{id: str("id"), listID: str("list_id"), description: str("description"), completed: int(n)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func sameTodos(t *testing.T, got, want []todoRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("client has %d todos, source %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("todo %d differs:\nclient %+v\nsource %+v", i, got[i], want[i])
		}
	}
}

// TestRealClient: first sync, then inserts, updates (including a todo
// moving between lists), deletes, a new list and a deleted list, each
// converging in the real SDK, which validates every checkpoint's checksums.
//
// It runs over both of the SDK's transports: HTTP streaming, and
// WebSocket (connectionMethod 'web-socket': RSocket on GET /sync/stream).
func TestRealClient(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	requireClient(t) // fail fast, before PostgreSQL, if Node/npm is broken
	onBothTransports(t, realClient)
}

func realClient(t *testing.T, method string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStack(t, ctx, todos.Size{Lists: 20, Todos: 500, Seed: 1})

	// The SDK asks for BSON; over HTTP its fetch is told to ask for zstd
	// too, as a browser's does (Node's asks for gzip and deflate only).
	c := startClient(t, s.endpoint, mintToken(t, "user1", 30*time.Minute), connect(method, "--accept-encoding", "zstd, gzip")...)
	ev := c.expect("first_sync", 3*time.Minute)
	wantLists, wantTodos := s.count(t, ctx, "SELECT count(*) FROM lists"), s.count(t, ctx, "SELECT count(*) FROM todos")
	if ev.Lists == nil || ev.Todos == nil || *ev.Lists != wantLists || *ev.Todos != wantTodos {
		t.Fatalf("first sync: %s, want %d lists and %d todos", ev.raw, wantLists, wantTodos)
	}
	sameTodos(t, c.todos(), s.sourceTodos(t, ctx))

	waitTodos := func(step string) {
		t.Helper()
		want := s.count(t, ctx, "SELECT count(*) FROM todos")
		c.send(map[string]any{"cmd": "wait", "todos": want, "timeout_ms": 60000})
		ev := c.expect("count", 90*time.Second)
		if ev.Todos == nil || *ev.Todos != want {
			t.Fatalf("%s: %s, want %d todos", step, ev.raw, want)
		}
	}
	waitN := func(step, q string, want int) {
		t.Helper()
		c.send(map[string]any{"cmd": "wait", "sql": q, "n": want, "timeout_ms": 60000})
		ev := c.expect("count", 90*time.Second)
		if ev.N == nil || *ev.N != want {
			t.Fatalf("%s: %s, want %d", step, ev.raw, want)
		}
	}

	// Inserts into existing lists.
	s.exec(t, ctx, `INSERT INTO todos (id, list_id, description, completed, created_at)
		SELECT gen_random_uuid(), id, 'inserted for ' || name, false, '2026-02-03 04:05:06.5+00'
		FROM lists ORDER BY id LIMIT 10`)
	waitTodos("insert")

	// Updates in place and a move between lists (REMOVE + PUT in two buckets).
	s.exec(t, ctx, `UPDATE todos SET description = 'updated ' || description, completed = NOT completed
		WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 15)`)
	s.exec(t, ctx, `UPDATE todos SET list_id = (SELECT id FROM lists ORDER BY id LIMIT 1)
		WHERE id IN (SELECT id FROM todos ORDER BY id DESC LIMIT 5)`)
	waitN("update", `SELECT count(*) FROM todos WHERE description LIKE 'updated %'`, 15)
	var first string
	if err := s.src.QueryRow(ctx, `SELECT id::text FROM lists ORDER BY id LIMIT 1`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	waitN("move", `SELECT count(*) FROM todos WHERE list_id = '`+first+`'`,
		s.count(t, ctx, `SELECT count(*) FROM todos WHERE list_id = '`+first+`'`))
	sameTodos(t, c.todos(), s.sourceTodos(t, ctx))

	// Deletes.
	s.exec(t, ctx, `DELETE FROM todos WHERE id IN (SELECT id FROM todos ORDER BY description LIMIT 20)`)
	waitTodos("delete")

	// A new list (a new by_list bucket appears) with todos.
	s.exec(t, ctx, `WITH l AS (INSERT INTO lists (id, name, owner_id) VALUES (gen_random_uuid(), 'new list', 'user1') RETURNING id)
		INSERT INTO todos (id, list_id, description) SELECT gen_random_uuid(), l.id, 'in the new list #' || g FROM l, generate_series(1, 7) g`)
	waitN("new list", `SELECT count(*) FROM lists`, s.count(t, ctx, "SELECT count(*) FROM lists"))
	waitTodos("new list")

	// A deleted list: its todos go by cascade and its bucket disappears.
	s.exec(t, ctx, `DELETE FROM lists WHERE id = (SELECT list_id FROM todos GROUP BY list_id ORDER BY count(*) DESC, list_id LIMIT 1)`)
	waitN("delete list", `SELECT count(*) FROM lists`, s.count(t, ctx, "SELECT count(*) FROM lists"))
	waitTodos("delete list")

	sameTodos(t, c.todos(), s.sourceTodos(t, ctx))

	// Compaction under the synced client: every todo updated a few times
	// (superseded PUTs become MOVEs, leading runs a CLEAR), then changed
	// again. The client keeps validating its checksums, and a fresh client
	// downloads the compacted buckets and validates them too.
	for i := range 3 {
		s.exec(t, ctx, fmt.Sprintf(`UPDATE todos SET description = 'pass %d ' || id`, i))
	}
	waitN("passes", `SELECT count(*) FROM todos WHERE description LIKE 'pass 2 %'`, s.count(t, ctx, "SELECT count(*) FROM todos"))
	groups, err := s.store.Catalog().Groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.store.Compactor().Compact(ctx, groups[len(groups)-1].ID, bucketstore.CompactOptions{BatchOps: 100})
	if err != nil || st.Moved == 0 || st.Cleared == 0 {
		t.Fatalf("compaction: %+v, %v; want MOVEs and CLEARs", st, err)
	}
	t.Logf("compacted under the client: %+v", st)
	s.exec(t, ctx, `UPDATE todos SET description = 'after compaction ' || id WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 10)`)
	waitN("after compaction", `SELECT count(*) FROM todos WHERE description LIKE 'after compaction %'`, 10)
	sameTodos(t, c.todos(), s.sourceTodos(t, ctx))
	fresh := startClient(t, s.endpoint, mintToken(t, "user1", 30*time.Minute), connect(method)...)
	ev = fresh.expect("first_sync", 3*time.Minute)
	if ev.Todos == nil || *ev.Todos != s.count(t, ctx, "SELECT count(*) FROM todos") {
		t.Fatalf("first sync after compaction: %s", ev.raw)
	}
	sameTodos(t, fresh.todos(), s.sourceTodos(t, ctx))
	fresh.exit()
	c.exit()
	sent := s.sentBytes(t, ctx)
	switch {
	case method == webSocket:
		// BSON lines in PAYLOAD frames, compressed by the socket: the SDK's
		// WebSocket (undici) offers per-message deflate.
		if len(sent) != 1 || sent["application/vnd.powersync.bson-stream, deflate, websocket"] == 0 {
			t.Fatalf("bytes sent by content type, coding and transport: %v, want BSON over WebSocket with deflate only", sent)
		}
	// The first client asked for zstd, the fresh one with Node's default
	// Accept-Encoding (gzip, deflate).
	case len(sent) != 2 || sent["application/vnd.powersync.bson-stream, zstd, http"] == 0 || sent["application/vnd.powersync.bson-stream, gzip, http"] == 0:
		t.Fatalf("bytes sent by content type, coding and transport: %v, want BSON with zstd and with gzip only", sent)
	}
	t.Logf("sent to the client: %v bytes", sent)

	// A token signed with another secret: the SDK gets 401 (over
	// WebSocket, REJECTED_SETUP with PSYNC_S2101), no data.
	bad, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "user1", "iat": time.Now().Unix(),
		"exp": time.Now().Add(time.Minute).Unix(), "aud": testAudience}).SignedString([]byte("another secret"))
	if err != nil {
		t.Fatal(err)
	}
	c2 := startClient(t, s.endpoint, bad, connect(method)...)
	select {
	case ev := <-c2.events:
		if ev.Event != "error" {
			t.Fatalf("client with a bad token: %s, want an error event", ev.raw)
		}
		t.Logf("bad token reported: %s %.200s", ev.Message, ev.Error)
	case <-time.After(time.Minute):
		t.Fatal("client with a bad token reported nothing")
	}
}
