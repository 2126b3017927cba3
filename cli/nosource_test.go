package cli

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/internal/torture"
)

// TestRunStartsWithoutItsSource: `syncpipe run` (role all) started while
// its source is down keeps running — it used to exit 1, which under
// Kubernetes is a crash loop taking down an API that could serve from
// storage. The API serves what storage holds, /healthz and status say
// why replication waits, and once the source answers replication starts
// without a restart and a change on the source reaches the client.
//
// The outage: a proxy between the process and the source that refuses
// connections until healed.
func TestRunStartsWithoutItsSource(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 60, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	want := e.todos(ctx, 1)
	e.start() // storage gets its data from a normal run first
	e.converge(ctx, time.Minute, want)
	e.waitCaughtUp(ctx) // a checkpoint: the group is ACTIVE, clients are served
	e.stop()

	proxy := refusingProxy(t, e)
	e.start()

	var body string
	e.waitFor(ctx, "/healthz to say degraded: source unreachable", func() bool {
		e.alive()
		var code int
		code, body = health(e.api)
		return code == 200 && strings.Contains(body, `"status":"degraded"`) && strings.Contains(body, `"error":"source unreachable: `)
	})
	t.Logf("/healthz with the source down: %s", body)
	status := e.runOnce(ctx, "status")
	if !strings.Contains(status, "source unreachable: ") {
		t.Errorf("status does not say the source is unreachable:\n%s", status)
	}
	failing := regexp.MustCompile(`(?m)^syncpipe_replication_failing_units\{[^}]*unit="start"[^}]*\} 1$`)
	e.waitFor(ctx, "the group's start to count as a failing unit", func() bool { return failing.MatchString(e.get(ctx, "/metrics")) })
	if code := e.getCode(ctx, "/write-checkpoint2.json?client_id=c1", e.token("alice")); code != http.StatusServiceUnavailable {
		t.Errorf("a write checkpoint while the source is down: %d, want 503", code)
	}

	client := &switchWatch{}
	cctx, stopClient := context.WithCancel(ctx)
	defer stopClient()
	go newSyncClient(e.api, e.token("alice"), client.observe).run(cctx)
	e.waitFor(ctx, "a client to get storage's data while the source is down", client.holds(want()))

	proxy.Heal()
	e.exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)")
	e.waitFor(ctx, "the change made once the source is back to reach the client", client.holds(want()))
	e.waitFor(ctx, "/healthz to be ok again", func() bool {
		code, body := health(e.api)
		return code == 200 && strings.Contains(body, `"status":"ok"`)
	})
	e.alive()
}

// TestRolesStartWithoutTheirSource: the same with the API and replication
// in processes of their own (`--role api`, `--role replication`), both
// started while the source is down: the API serves storage's data and
// reports the stored error, replication keeps running and catches up once
// the source answers.
func TestRolesStartWithoutTheirSource(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 2, Todos: 20, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	want := e.todos(ctx, 1)
	e.start()
	e.converge(ctx, time.Minute, want)
	e.waitCaughtUp(ctx)
	e.stop()

	proxy := refusingProxy(t, e)
	api := e.startRole("api", e.env...)
	repl := e.startRole("replication", e.env...)
	running := func() {
		for name, c := range map[string]*child{"api": api, "replication": repl} {
			select {
			case <-c.exited:
				t.Fatalf("the %s process exited: %v", name, c.err)
			default:
			}
		}
	}
	e.waitFor(ctx, "the API's /healthz to say degraded: source unreachable", func() bool {
		running()
		code, body := health(e.api)
		return code == 200 && strings.Contains(body, `"error":"source unreachable: `)
	})
	client := &switchWatch{}
	cctx, stopClient := context.WithCancel(ctx)
	defer stopClient()
	go newSyncClient(e.api, e.token("alice"), client.observe).run(cctx)
	e.waitFor(ctx, "a client to get storage's data from the API while the source is down", client.holds(want()))
	proxy.Heal()
	e.exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 5)")
	e.waitFor(ctx, "the change made once the source is back to reach the client", client.holds(want()))
	running()
}

// TestRestartClearsSourceUnreachable: the "source unreachable" error a
// process stored while it waited for its source does not outlive it. A
// process stopped (a deploy) before the source came back leaves it in
// storage; the next one, started with the source up, clears it — left
// there, /healthz would say degraded for good.
func TestRestartClearsSourceUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 2, Todos: 20, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	proxy := refusingProxy(t, e)
	lastError := func() string {
		var msg string
		if err := e.storage.QueryRow(ctx, "SELECT coalesce(last_error, '') FROM syncpipe.groups WHERE id = 1").Scan(&msg); err != nil {
			return ""
		}
		return msg
	}
	e.start()
	e.waitFor(ctx, "the outage to be stored", func() bool { return strings.HasPrefix(lastError(), "source unreachable: ") })
	e.stop()
	proxy.Heal()
	e.start()
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	e.waitFor(ctx, "the stored outage to be cleared", func() bool { return lastError() == "" })
	e.waitFor(ctx, "/healthz to be ok", func() bool {
		code, body := health(e.api)
		return code == 200 && strings.Contains(body, `"status":"ok"`)
	})
}

// TestRunChecksRulesOnceTheSourceAnswers: the start-up check of the rules
// against the source's tables and columns (warnings, as PowerSync gives
// them) is not skipped when the source is down at start: it runs when the
// source answers.
func TestRunChecksRulesOnceTheSourceAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: "bucket_definitions:\n  global:\n    data:\n      - SELECT id, name, colour FROM lists\n"})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 2, Todos: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	proxy := refusingProxy(t, e)
	c := e.start()
	e.waitFor(ctx, "the source's outage to be reported", func() bool { return c.count(`"msg":"replication needs attention"`) > 0 })
	const warning = `does not exist in table public.lists`
	if c.count(warning) > 0 {
		t.Fatal("the rules were checked against a source that does not answer")
	}
	proxy.Heal()
	e.waitFor(ctx, "the rules' warning once the source answers", func() bool { return c.count(warning) > 0 })
}

// refusingProxy puts a proxy that refuses connections (until healed)
// between the children e starts next and their source.
func refusingProxy(t *testing.T, e *streamEnv) *torture.Proxy {
	t.Helper()
	srcURI, err := url.Parse(e.srcURI)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := torture.NewProxy("source", srcURI.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.Refuse()
	srcURI.Host = proxy.Addr()
	e.env = append(e.env, "SYNCPIPE_SOURCE__URI="+srcURI.String())
	return proxy
}

// getCode returns the status code of GET path on the API, sent with
// token (0 when the API does not answer).
func (e *streamEnv) getCode(ctx context.Context, path, token string) int {
	e.t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+e.api+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
