package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// GrowTodos inserts two todos into random lists of the source every 30 ms
// until ctx ends: changes that stream while a test does something else
// (a crash, a takeover, an upgrade). A failed insert fails the test. The
// channel closes when the load has stopped; the test's cleanup waits for
// it before the connection's own cleanup closes the connection, so ctx
// must end before the test's cleanups run (a deferred cancel does).
func (e *Env) GrowTodos(ctx context.Context, t testing.TB) <-chan struct{} {
	conn := pgtest.Connect(t, e.SourceURI)
	done := make(chan struct{})
	t.Cleanup(func() { <-done }) // runs before Connect's cleanup: last registered, first run
	go func() {
		defer close(done)
		for n := 0; ctx.Err() == nil; n++ {
			_, err := conn.Exec(ctx, `INSERT INTO todos (id, list_id, description)
				SELECT gen_random_uuid(), id, 'grown ' || $1::text FROM lists ORDER BY random() LIMIT 2`, fmt.Sprint(n))
			if err != nil && ctx.Err() == nil {
				t.Errorf("grow the source: %v", err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(30 * time.Millisecond): // the pace of the load, not synchronisation
			}
		}
	}()
	return done
}
