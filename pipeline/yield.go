package pipeline

import "context"

type yieldKey struct{}

// yieldContext returns the context the scheduler cancels when it wants the
// unit running under ctx to give its worker slot to more urgent work, or nil
// outside a scheduler unit. Preemption is cooperative, and a Pipeline run
// under ctx is what cooperates: it stops reading, commits what it read and
// returns ErrYielded. It is a context (not a bare channel) so Pipeline.Run
// can react with context.AfterFunc instead of a watcher goroutine.
func yieldContext(ctx context.Context) context.Context {
	y, _ := ctx.Value(yieldKey{}).(context.Context)
	return y
}
