package pipeline

import "context"

type yieldKey struct{}

// YieldRequested returns a channel that is closed when the Scheduler wants
// the unit running under ctx to give its worker slot to more urgent work.
// Preemption is cooperative: the unit should stop at its next batch boundary,
// make its progress durable and return an error matching ErrYielded; it will
// be re-queued and later run again from its committed progress. A Pipeline
// run under such a ctx does all of that by itself. Outside a scheduler unit
// it returns nil, which never fires in a select.
func YieldRequested(ctx context.Context) <-chan struct{} {
	if y := yieldContext(ctx); y != nil {
		return y.Done()
	}
	return nil
}

// yieldContext returns the context the scheduler cancels to request a
// yield. It is a context (not a bare channel) so Pipeline.Run can react with
// context.AfterFunc instead of a watcher goroutine.
func yieldContext(ctx context.Context) context.Context {
	y, _ := ctx.Value(yieldKey{}).(context.Context)
	return y
}
