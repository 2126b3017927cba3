package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultDepth is the output channel capacity of a stage when neither
// StageConfig.Depth nor Config.Depth is set: two batches let a stage start on
// batch k+1 while batch k waits downstream, without hoarding memory.
const DefaultDepth = 2

// Config describes a pipeline as a whole. The zero value works; Name and
// Labels are worth setting so that traces and summaries are readable.
type Config struct {
	// Name identifies the pipeline in errors, spans and summaries, for
	// example "snapshot" or "stream".
	Name string
	// Labels are passed to tracers and metrics with every event (for example
	// table=todos, range=3).
	Labels []Label
	// Depth is the default capacity of the channels between stages
	// (DefaultDepth if 0).
	Depth int
	// Tracer, if set, observes every batch of every stage. Combine several
	// with MultiTracer.
	Tracer StageTracer
	// MaxInFlight, if positive, bounds the batches the source has handed
	// out that are not yet committed: the source is not asked for the next
	// one until an earlier one is. A source that batches whatever has
	// arrived (a replication stream) then makes one large batch while the
	// slowest stage works, instead of the channels filling with small ones
	// that each wait their turn there (latency that grows with the
	// pipeline's depth).
	MaxInFlight int
}

// Pipeline is one run's worth of wired stages: a Source, any number of
// Process and Flush stages, and a Commit. Build it with New, From, Process,
// Flush and Commit from one goroutine, then call Run once. Because Go methods
// cannot introduce type parameters, stages are added with package functions
// that take and return typed Streams rather than with methods.
//
// P is the progress token type shared by all batches of the pipeline.
type Pipeline[P any] struct {
	cfg      Config
	hooks    hooks
	runners  []func(ctx context.Context, rs *runState)
	names    map[string]bool
	dangling map[string]bool // stages whose output stream nobody consumes yet
	errs     []error         // wiring mistakes, reported by Run
	inflight int             // upper bound of batches in flight, sizes reorder rings
	source   bool
	commit   bool

	stopOnce sync.Once
	stop     chan struct{}
	ran      atomic.Bool
}

// New returns an empty pipeline. Add a source with From.
func New[P any](cfg Config) *Pipeline[P] {
	if cfg.Depth <= 0 {
		cfg.Depth = DefaultDepth
	}
	h := hooks{pipeline: cfg.Name, labels: cfg.Labels, tracer: cfg.Tracer}
	if b, ok := cfg.Tracer.(BackpressureTracer); ok {
		h.blocked = b
	}
	return &Pipeline[P]{
		cfg:      cfg,
		hooks:    h,
		names:    map[string]bool{},
		dangling: map[string]bool{},
		stop:     make(chan struct{}),
	}
}

// Stop asks the pipeline to stop softly: the source is not asked for another
// batch, every batch already read flows through all stages and is committed,
// and Run returns nil. It is safe to call from any goroutine, more than once,
// and before Run (the run then reads nothing). To abort instead, cancel the
// context passed to Run.
func (p *Pipeline[P]) Stop() { p.stopOnce.Do(func() { close(p.stop) }) }

// Run executes the pipeline and blocks until it ends, which happens when:
//
//   - the source returns ErrEndOfInput and every batch is committed: nil;
//   - Stop was called and the in-flight batches are committed (soft stop): nil;
//   - the scheduler asked the unit running under ctx to yield and the
//     in-flight batches are committed: an error matching ErrYielded;
//   - a stage fails: the first failure, as a *StageError; the remaining
//     stages are cancelled and nothing further is committed;
//   - ctx is cancelled (hard stop): ctx's error, wrapped; in-flight batches
//     are abandoned and nothing further is committed.
//
// In every case all goroutines the pipeline started have exited when Run
// returns. Wiring mistakes (a missing source or commit, a stream consumed
// twice, a nil function) are reported here, all at once, before anything runs.
func (p *Pipeline[P]) Run(ctx context.Context) error {
	if !p.ran.CompareAndSwap(false, true) {
		return fmt.Errorf("run pipeline %s: %w", p.cfg.Name, ErrAlreadyRun)
	}
	if err := p.check(); err != nil {
		return fmt.Errorf("build pipeline %s: %w", p.cfg.Name, err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	rs := &runState{pipeline: p.cfg.Name, cancel: cancel, stop: p.stop}
	if p.cfg.MaxInFlight > 0 {
		rs.slots = make(chan struct{}, p.cfg.MaxInFlight)
	}
	y := yieldContext(ctx)
	if y != nil {
		// The source polls rs.yield at every batch boundary, which sees a
		// yield request synchronously; closing the drain channel as well
		// wakes sources blocked inside Next on Draining(ctx).
		rs.yield = y.Done()
		defer context.AfterFunc(y, p.Stop)()
	}
	runCtx = context.WithValue(runCtx, drainKey{}, (<-chan struct{})(p.stop))

	var wg sync.WaitGroup
	for _, run := range p.runners {
		wg.Go(func() { run(runCtx, rs) })
	}
	wg.Wait()

	switch {
	case rs.err != nil:
		return rs.err
	case !rs.complete.Load():
		cause := context.Cause(ctx)
		if cause == nil {
			cause = errors.New("stopped before the commit stage finished")
		}
		return fmt.Errorf("run pipeline %s: %w", p.cfg.Name, cause)
	case rs.drained.Load() && y != nil && y.Err() != nil:
		return fmt.Errorf("run pipeline %s: %w", p.cfg.Name, ErrYielded)
	}
	return nil
}

func (p *Pipeline[P]) check() error {
	errs := p.errs
	if !p.source {
		errs = append(errs, errors.New("no source (use From)"))
	}
	if !p.commit {
		errs = append(errs, errors.New("no commit stage (use Commit)"))
	}
	for name := range p.dangling {
		errs = append(errs, fmt.Errorf("output of stage %s is not consumed", name))
	}
	return errors.Join(errs...)
}

// runState is what the stages of one run share.
type runState struct {
	pipeline string
	cancel   context.CancelCauseFunc
	stop     <-chan struct{}
	yield    <-chan struct{} // nil unless run by a Scheduler
	drained  atomic.Bool     // the source stopped because of a soft stop
	complete atomic.Bool     // the commit stage saw the end of its input, all committed
	slots    chan struct{}   // Config.MaxInFlight: one per uncommitted batch; nil unbounded

	mu  sync.Mutex
	err error
}

// fail records the first real failure and cancels the run. Errors that arrive
// after the run was cancelled are consequences of the cancellation, not
// causes, and are dropped so the caller sees what actually went wrong.
func (r *runState) fail(ctx context.Context, s *stage, seq uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || ctx.Err() != nil {
		return
	}
	r.err = &StageError{Pipeline: r.pipeline, Stage: s.name, Seq: seq, Err: err}
	r.cancel(r.err)
}

type drainKey struct{}

// Draining returns a channel that is closed when the pipeline running the
// caller has been asked to stop softly (Stop, or a scheduler yield). A source
// that blocks for long inside Next selects on it to return ErrEndOfInput
// early. Outside a pipeline run it returns nil, which blocks forever in a
// select, so callers need no special case.
func Draining(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(drainKey{}).(<-chan struct{})
	return ch
}
