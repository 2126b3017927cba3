package badinput

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/torture"
	"github.com/syncpipe/syncpipe/internal/todos"
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
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 60, Seed: 8}})
	want := e.Todos(ctx, 1)
	e.Start() // storage gets its data from a normal run first
	e.Converge(ctx, time.Minute, want)
	e.WaitCaughtUp(ctx) // a checkpoint: the group is ACTIVE, clients are served
	e.StopAll()

	proxy, srcEnv := refusingProxy(t, e)
	e.StartWith(harness.ProcConfig{Env: srcEnv})

	var body string
	e.WaitFor(ctx, "/healthz to say degraded: source unreachable", func() bool {
		var code int
		code, body = harness.Get(ctx, e.API, "/healthz", "")
		return code == 200 && strings.Contains(body, `"status":"degraded"`) && strings.Contains(body, `"error":"source unreachable: `)
	})
	t.Logf("/healthz with the source down: %s", body)
	code, stdout, stderr := harness.RunWith(t, ctx, harness.ProcConfig{Args: []string{"status", "--config", e.Config}, Env: srcEnv})
	status := stdout + stderr
	if code != 0 {
		t.Fatalf("syncpipe status: exit %d\n%s", code, status)
	}
	if !strings.Contains(status, "source unreachable: ") {
		t.Errorf("status does not say the source is unreachable:\n%s", status)
	}
	failing := regexp.MustCompile(`(?m)^syncpipe_replication_failing_units\{[^}]*unit="start"[^}]*\} 1$`)
	e.WaitFor(ctx, "the group's start to count as a failing unit", func() bool {
		_, metrics := harness.Get(ctx, e.API, "/metrics", "")
		return failing.MatchString(metrics)
	})
	if code, _ := harness.Get(ctx, e.API, "/write-checkpoint2.json?client_id=c1", e.Token("alice")); code != http.StatusServiceUnavailable {
		t.Errorf("a write checkpoint while the source is down: %d, want 503", code)
	}

	client := &harness.CheckpointWatch{}
	e.Sync("alice", client.Observe)
	e.WaitFor(ctx, "a client to get storage's data while the source is down", client.Holds(want()))

	proxy.Heal()
	e.Exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)")
	e.WaitFor(ctx, "the change made once the source is back to reach the client", client.Holds(want()))
	e.WaitFor(ctx, "/healthz to be ok again", func() bool {
		code, body := harness.Get(ctx, e.API, "/healthz", "")
		return code == 200 && strings.Contains(body, `"status":"ok"`)
	})
	e.Alive()
}

// TestRolesStartWithoutTheirSource: the same with the API and replication
// in processes of their own (`--role api`, `--role replication`), both
// started while the source is down: the API serves storage's data and
// reports the stored error, replication keeps running and catches up once
// the source answers.
func TestRolesStartWithoutTheirSource(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 2, Todos: 20, Seed: 3}})
	want := e.Todos(ctx, 1)
	e.Start()
	e.Converge(ctx, time.Minute, want)
	e.WaitCaughtUp(ctx)
	e.StopAll()

	proxy, srcEnv := refusingProxy(t, e)
	api := e.StartRole("api", srcEnv...)
	repl := e.StartRole("replication", srcEnv...)
	running := func() {
		for name, p := range map[string]*harness.Proc{"api": api, "replication": repl} {
			if !p.Running() {
				t.Fatalf("the %s process exited: %v", name, p.Err())
			}
		}
	}
	e.WaitFor(ctx, "the API's /healthz to say degraded: source unreachable", func() bool {
		running()
		code, body := harness.Get(ctx, e.API, "/healthz", "")
		return code == 200 && strings.Contains(body, `"error":"source unreachable: `)
	})
	client := &harness.CheckpointWatch{}
	e.Sync("alice", client.Observe)
	e.WaitFor(ctx, "a client to get storage's data from the API while the source is down", client.Holds(want()))
	proxy.Heal()
	e.Exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 5)")
	e.WaitFor(ctx, "the change made once the source is back to reach the client", client.Holds(want()))
	running()
}

// TestRestartClearsSourceUnreachable: the "source unreachable" error a
// process stored while it waited for its source does not outlive it. A
// process stopped (a deploy) before the source came back leaves it in
// storage; the next one, started with the source up, clears it — left
// there, /healthz would say degraded for good.
func TestRestartClearsSourceUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 2, Todos: 20, Seed: 4}})
	proxy, srcEnv := refusingProxy(t, e)
	lastError := func() string {
		var msg string
		if err := e.Storage.QueryRow(ctx, "SELECT coalesce(last_error, '') FROM syncpipe.groups WHERE id = 1").Scan(&msg); err != nil {
			return ""
		}
		return msg
	}
	e.StartWith(harness.ProcConfig{Env: srcEnv})
	e.WaitFor(ctx, "the outage to be stored", func() bool { return strings.HasPrefix(lastError(), "source unreachable: ") })
	e.StopAll()
	proxy.Heal()
	e.StartWith(harness.ProcConfig{Env: srcEnv})
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	e.WaitFor(ctx, "the stored outage to be cleared", func() bool { return lastError() == "" })
	e.WaitFor(ctx, "/healthz to be ok", func() bool {
		code, body := harness.Get(ctx, e.API, "/healthz", "")
		return code == 200 && strings.Contains(body, `"status":"ok"`)
	})
}

// TestRunChecksRulesOnceTheSourceAnswers: the start-up check of the rules
// against the source's tables and columns (warnings, as PowerSync gives
// them) is not skipped when the source is down at start: it runs when the
// source answers.
func TestRunChecksRulesOnceTheSourceAnswers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{
		Rules: "bucket_definitions:\n  global:\n    data:\n      - SELECT id, name, colour FROM lists\n",
		Data:  &todos.Size{Lists: 2, Todos: 4, Seed: 1},
	})
	proxy, srcEnv := refusingProxy(t, e)
	c := e.StartWith(harness.ProcConfig{Env: srcEnv})
	e.WaitFor(ctx, "the source's outage to be reported", func() bool { return c.Count(`"msg":"replication needs attention"`) > 0 })
	const warning = `does not exist in table public.lists`
	if c.Count(warning) > 0 {
		t.Fatal("the rules were checked against a source that does not answer")
	}
	proxy.Heal()
	e.WaitFor(ctx, "the rules' warning once the source answers", func() bool { return c.Count(warning) > 0 })
}

// refusingProxy puts a proxy that refuses connections (until healed)
// between e's source and the children started with srcEnv.
func refusingProxy(t *testing.T, e *harness.Env) (proxy *torture.Proxy, srcEnv []string) {
	t.Helper()
	srcURI, err := url.Parse(e.SourceURI)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err = torture.NewProxy("source", srcURI.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.Refuse()
	srcURI.Host = proxy.Addr()
	return proxy, []string{"SYNCPIPE_SOURCE__URI=" + srcURI.String()}
}
