package schema

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestReloadWarnsOfMissingColumn: a SIGHUP reload is judged as validate
// and start-up judge rules. Rules naming a column the source lacks (a
// misspelling that would drop the field from every client) are applied
// as PowerSync applies them, but only after a WARN log line with the
// rules' file:line, and `syncpipe status` shows the warning with the new
// rules' group.
func TestReloadWarnsOfMissingColumn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 30, Seed: 5}})
	c := e.Start()
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	e.WriteFile("rules.yaml", strings.Replace(todos.Rules, "SELECT * FROM lists\n", "SELECT id, name, ownr_id FROM lists\n", 1))
	c.Signal(syscall.SIGHUP)
	warned := regexp.MustCompile(`"level":"WARN","msg":"sync rules: [^"]*rules\.yaml:4:\d+: .*ownr_id`)
	e.WaitFor(ctx, "a WARN naming the misspelled column at rules.yaml:4", func() bool {
		return warned.MatchString(c.Logs())
	})
	var stored []string
	e.WaitFor(ctx, "group 2 with the warning stored", func() bool {
		err := e.Storage.QueryRow(ctx, "SELECT rules_warnings FROM syncpipe.groups WHERE id = 2").Scan(&stored)
		return err == nil && len(stored) > 0
	})
	out := status(ctx, e)
	if !regexp.MustCompile(`(?m)^SYNC RULES WARNINGS\ngroup 2 \((PROCESSING|ACTIVE)\):\n    \S*rules\.yaml:4:\d+: .*ownr_id`).MatchString(out) {
		t.Fatalf("status does not show group 2's warning about ownr_id at rules.yaml:4:\n%s", out)
	}
}

// TestReloadRefusesTableWithoutKey: rules naming a table without a
// primary key are refused at a SIGHUP reload, as validate refuses them:
// no new group, and the old rules keep serving the changes that follow.
func TestReloadRefusesTableWithoutKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 30, Seed: 6}})
	e.Exec(ctx, `CREATE TABLE notes (id text, body text)`)
	c := e.Start()
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	e.WriteFile("rules.yaml", todos.Rules+"  notes:\n    data:\n      - SELECT * FROM notes\n")
	c.Signal(syscall.SIGHUP)
	e.WaitFor(ctx, "the reload refused for notes' missing key", func() bool {
		return c.Logged(`"msg":"sync rules not reloaded; replication goes on with the rules it has"`) &&
			c.Logged(`table public.notes has no primary key`)
	})
	e.Exec(ctx, `UPDATE todos SET description = 'after the refused reload ' || id WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 5)`)
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	if ids, _ := e.Groups(ctx); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("groups %v after the refused reload, want only group 1", ids)
	}
}

// TestStartupWarningsInStatus: the warnings run's start-up check logs
// for the configured rules are stored with their group too, so `status`
// shows a misspelled column for as long as those rules serve.
func TestStartupWarningsInStatus(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{
		Rules: strings.Replace(todos.Rules, "SELECT * FROM lists\n", "SELECT id, name, ownr_id FROM lists\n", 1),
		Data:  &todos.Size{Lists: 2, Todos: 4, Seed: 7},
	})
	e.Start()
	e.WaitFor(ctx, "group 1 with the warning stored", func() bool {
		var stored []string
		err := e.Storage.QueryRow(ctx, "SELECT rules_warnings FROM syncpipe.groups WHERE id = 1").Scan(&stored)
		return err == nil && len(stored) > 0
	})
	out := status(ctx, e)
	if !regexp.MustCompile(`(?m)^SYNC RULES WARNINGS\ngroup 1 \((PROCESSING|ACTIVE)\):\n    \S*rules\.yaml:4:\d+: .*ownr_id`).MatchString(out) {
		t.Fatalf("status does not show group 1's warning about ownr_id at rules.yaml:4:\n%s", out)
	}
}

// status runs `syncpipe status` on e's config, which must succeed, and
// returns its output (stdout, then stderr).
func status(ctx context.Context, e *harness.Env) string {
	e.T.Helper()
	code, stdout, stderr := harness.Run(e.T, ctx, "status", "--config", e.Config)
	if code != 0 {
		e.T.Fatalf("syncpipe status: exit %d\n%s%s", code, stdout, stderr)
	}
	return stdout + stderr
}
