package workers

import (
	"context"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// converge is Env.Converge for the todos of group 1 watching p rather
// than the Env's last child: with several processes, the one that must
// stay up is not always the one started last.
func converge(ctx context.Context, e *harness.Env, p *harness.Proc, timeout time.Duration) {
	t := e.T
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	defer func() {
		if t.Failed() && last != nil {
			t.Logf("storage still differed from the source: %v", last)
		}
	}()
	want := e.Todos(ctx, 1)
	harness.Poll(t, cctx, p, "storage equal to the source", func() bool {
		got, err := bucketcheck.Stored(ctx, e.Storage, "syncpipe")
		if err == nil {
			err = bucketcheck.Diff(got, want())
		}
		last = err
		return err == nil
	})
}

// sleepUntil waits until deadline, or fails when ctx ends or p exits. It
// paces a measurement window; it synchronises with nothing.
func sleepUntil(t testing.TB, ctx context.Context, p *harness.Proc, deadline time.Time) {
	t.Helper()
	tm := time.NewTimer(time.Until(deadline))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
		t.Fatalf("waiting until %s: %v", deadline.Format(time.TimeOnly), ctx.Err())
	case <-p.Exited():
		t.Fatalf("syncpipe exited: %v", p.Err())
	}
}
