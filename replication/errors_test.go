package replication

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sources/postgres"
)

// TestStoredErrorClearsOnRecovery checks the life of a stored error: a
// fatal error is stored once (the same message again writes nothing), a
// retryable one is never stored, and the error is cleared by the unit's
// next progress — and only then.
func TestStoredErrorClearsOnRecovery(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, todos.Size{Lists: 1, Todos: 1, Seed: 1}, "")
	g, err := e.store.Catalog().CreateGroup(ctx, "rules", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{Config: e.cfg, Store: e.store})
	lastError := func() (string, time.Time) {
		t.Helper()
		cur, err := e.store.Catalog().Group(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		return cur.LastError, cur.LastErrorAt
	}
	fatalErr := fmt.Errorf("stream: %w", postgres.ErrWalLevel)
	if !fatal(fatalErr) || fatal(fmt.Errorf("connection reset")) {
		t.Fatal("fatal() misclassifies")
	}
	r.report(ctx, g.ID, "group stream", fatalErr)
	msg, at := lastError()
	if msg != fatalErr.Error() || at.IsZero() {
		t.Fatalf("stored error %q at %v, want %q with its time", msg, at, fatalErr)
	}
	r.report(ctx, g.ID, "group stream", fatalErr)
	if _, again := lastError(); !again.Equal(at) {
		t.Fatal("the same error was stored again")
	}
	r.recovered(ctx, g.ID)
	if msg, _ := lastError(); msg != "" {
		t.Fatalf("error %q still stored after the unit recovered", msg)
	}
	if r.errs.progressOf(g.ID) == 0 {
		t.Fatal("recovery not counted as progress")
	}
}
