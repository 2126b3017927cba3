package cli

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/internal/torture"
)

// TestStorageLostDuringStartIsRetried: storage that restarts while
// `syncpipe run` starts — after the process reached it, before its
// workers run — costs a retry, not the process. The torture suite's CI
// run of d7f670b found a replication process that started as storage
// crashed exit with "syncpipe run: list groups: failed to connect …
// unexpected EOF": only the units retried lost connections, the start-up
// before them did not.
//
// The trial, deterministic: the test holds the advisory lock the
// start-up's group lookup takes (bucketstore.EnsureGroup), so the child
// waits on it with its storage connection open; then a proxy between the
// child and storage closes every connection and refuses new ones until
// the child has retried three times. Want: the process keeps running,
// says it retries, and snapshots and streams once storage is back.
func TestStorageLostDuringStartIsRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newStreamEnv(t, envOptions{rules: todos.Rules})
	if _, err := todos.Load(ctx, e.src, todos.Size{Lists: 3, Todos: 60, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	storageURI, err := url.Parse(e.storage.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := torture.NewProxy("storage", storageURI.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	storageURI.Host = proxy.Addr()
	e.env = append(e.env, "SYNCPIPE_STORAGE__URI="+storageURI.String())

	lock, err := e.storage.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	const ensureGroupLock = 0x5347 // bucketstore's ensureGroupLockClass
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock($1, 0)", ensureGroupLock); err != nil {
		t.Fatal(err)
	}
	c := e.startWith(nil, "--role", "replication")
	e.waitFor(ctx, "the start-up to wait for the group lock", func() bool {
		var n int
		err := e.storage.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'syncpipe' AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
		return err == nil && n > 0
	})
	if n := proxy.Cut(); n == 0 {
		t.Fatal("the proxy cut no connection")
	}
	e.waitFor(ctx, "the start-up to retry three times", func() bool {
		return c.count(`"unit":"start-up: read the replication groups","attempt":3,`) > 0
	})
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_unlock($1, 0)", ensureGroupLock); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	e.exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)")
	e.converge(ctx, time.Minute, e.todos(ctx, 1))
	e.alive()
}
