package cli

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestReloadWarnsOfMissingColumn: a SIGHUP reload is judged as validate
// and start-up judge rules. Rules naming a column the source lacks (a
// misspelling that would drop the field from every client) are applied
// as PowerSync applies them, but only after a WARN log line with the
// rules' file:line, and `syncpipe status` shows the warning with the new
// rules' group.
func TestReloadWarnsOfMissingColumn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 30, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	c := e.start()
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	e.writeRules(strings.Replace(todos.Rules, "SELECT * FROM lists\n", "SELECT id, name, ownr_id FROM lists\n", 1))
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	warned := regexp.MustCompile(`"level":"WARN","msg":"sync rules: [^"]*rules\.yaml:4:\d+: .*ownr_id`)
	e.waitFor(ctx, "a WARN naming the misspelled column at rules.yaml:4", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return warned.Match(c.logs.Bytes())
	})
	var stored []string
	e.waitFor(ctx, "group 2 with the warning stored", func() bool {
		err := e.storage.QueryRow(ctx, "SELECT rules_warnings FROM syncpipe.groups WHERE id = 2").Scan(&stored)
		return err == nil && len(stored) > 0
	})
	out := e.runOnce(ctx, "status")
	if !regexp.MustCompile(`(?m)^SYNC RULES WARNINGS\ngroup 2 \((PROCESSING|ACTIVE)\):\n    \S*rules\.yaml:4:\d+: .*ownr_id`).MatchString(out) {
		t.Fatalf("status does not show group 2's warning about ownr_id at rules.yaml:4:\n%s", out)
	}
}

// TestReloadRefusesTableWithoutKey: rules naming a table without a
// primary key are refused at a SIGHUP reload, as validate refuses them:
// no new group, and the old rules keep serving the changes that follow.
func TestReloadRefusesTableWithoutKey(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 30, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	e.exec(ctx, `CREATE TABLE notes (id text, body text)`)
	c := e.start()
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	e.writeRules(todos.Rules + "  notes:\n    data:\n      - SELECT * FROM notes\n")
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e.waitFor(ctx, "the reload refused for notes' missing key", func() bool {
		return c.count(`"msg":"sync rules not reloaded; replication goes on with the rules it has"`) > 0 &&
			c.count(`table public.notes has no primary key`) > 0
	})
	e.exec(ctx, `UPDATE todos SET description = 'after the refused reload ' || id WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 5)`)
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	if ids, _ := e.groups(ctx); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("groups %v after the refused reload, want only group 1", ids)
	}
}

// TestStartupWarningsInStatus: the warnings run's start-up check logs
// for the configured rules are stored with their group too, so `status`
// shows a misspelled column for as long as those rules serve.
func TestStartupWarningsInStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: strings.Replace(todos.Rules, "SELECT * FROM lists\n", "SELECT id, name, ownr_id FROM lists\n", 1)})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 2, Todos: 4, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitFor(ctx, "group 1 with the warning stored", func() bool {
		var stored []string
		err := e.storage.QueryRow(ctx, "SELECT rules_warnings FROM syncpipe.groups WHERE id = 1").Scan(&stored)
		return err == nil && len(stored) > 0
	})
	out := e.runOnce(ctx, "status")
	if !regexp.MustCompile(`(?m)^SYNC RULES WARNINGS\ngroup 1 \((PROCESSING|ACTIVE)\):\n    \S*rules\.yaml:4:\d+: .*ownr_id`).MatchString(out) {
		t.Fatalf("status does not show group 1's warning about ownr_id at rules.yaml:4:\n%s", out)
	}
}
