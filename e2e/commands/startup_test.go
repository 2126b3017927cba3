package commands

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/torture"
	"github.com/syncpipe/syncpipe/internal/todos"
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
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Data: &todos.Size{Lists: 3, Todos: 60, Seed: 8}})
	storageURI, err := url.Parse(e.StorageURI)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := torture.NewProxy("storage", storageURI.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	storageURI.Host = proxy.Addr()

	lock, err := e.Storage.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	const ensureGroupLock = 0x5347 // bucketstore's ensureGroupLockClass
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock($1, 0)", ensureGroupLock); err != nil {
		t.Fatal(err)
	}
	c := e.StartWith(harness.ProcConfig{Args: []string{"--role", "replication"}, Env: []string{"SYNCPIPE_STORAGE__URI=" + storageURI.String()}})
	e.WaitFor(ctx, "the start-up to wait for the group lock", func() bool {
		var n int
		err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'syncpipe' AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
		return err == nil && n > 0
	})
	if n := proxy.Cut(); n == 0 {
		t.Fatal("the proxy cut no connection")
	}
	e.WaitFor(ctx, "the start-up to retry three times", func() bool {
		return c.Logged(`"unit":"start-up: read the replication groups","attempt":3,`)
	})
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_unlock($1, 0)", ensureGroupLock); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	e.Exec(ctx, "UPDATE todos SET completed = NOT completed WHERE id IN (SELECT id FROM todos LIMIT 10)")
	e.Converge(ctx, time.Minute, e.Todos(ctx, 1))
	e.Alive()
}
