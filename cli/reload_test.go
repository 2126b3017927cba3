package cli

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
)

// TestReloadOnSIGHUP: a running `syncpipe run` gets a changed rules file
// and SIGHUP: without a restart, a reprocessing group snapshots and
// streams the new rules in the background while the old group keeps
// serving, takes over once caught up (ACTIVE), and the old group is
// retired — its storage cleared. Changes made during the switch end up
// in the new group.
func TestReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 5, Todos: 500, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	c := e.start()
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	state := func(id int) (s string) {
		_ = e.storage.QueryRow(ctx, "SELECT state FROM syncpipe.groups WHERE id = $1", id).Scan(&s)
		return s
	}
	e.waitFor(ctx, "group 1 ACTIVE", func() bool { return state(1) == "ACTIVE" })

	// Same buckets, new rules text: a new rules version.
	e.writeRules("# version 2\n" + todos.Rules)
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e.waitFor(ctx, "a reprocessing group", func() bool { return state(2) != "" })
	e.exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 50)")
	e.waitFor(ctx, "group 2 ACTIVE and group 1 retired", func() bool {
		return state(2) == "ACTIVE" && state(1) == "TERMINATED"
	})
	var left int
	e.waitFor(ctx, "group 1's storage cleared", func() bool {
		err := e.storage.QueryRow(ctx, "SELECT count(*) FROM syncpipe.bucket_data WHERE group_id = 1").Scan(&left)
		return err == nil && left == 0
	})
	e.converge(ctx, time.Minute, e.todos(ctx, 2))
	e.alive()
	if !e.logged("SIGHUP: reading the sync rules again") {
		t.Fatal("the reload was not logged")
	}
}
