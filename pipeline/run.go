package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// hooks are the observers of one pipeline, resolved once at New so the hot
// path only tests for nil.
type hooks struct {
	pipeline string
	labels   []Label
	tracer   StageTracer
	blocked  BackpressureTracer
}

// stage is the runtime identity of one stage.
type stage struct {
	h    *hooks
	name string
	kind StageKind
}

func (s *stage) info(worker int, seq uint64, rows int, bytes int64) StageInfo {
	return StageInfo{Pipeline: s.h.pipeline, Labels: s.h.labels, Stage: s.name, Kind: s.kind,
		Worker: worker, Seq: seq, Rows: rows, Bytes: bytes}
}

// stageFunc is the common shape every stage kind is reduced to.
type stageFunc[In, Out, P any] = func(ctx context.Context, b Batch[In, P]) (Batch[Out, P], error)

// invoke runs one stage function on one batch with tracing and panic
// recovery. Without observers it adds nothing but the recover. The
// outer recover covers the observers themselves: a panicking tracer fails the
// stage instead of crashing the process from a framework goroutine.
func invoke[In, Out, P any](ctx context.Context, s *stage, worker int, b Batch[In, P], fn stageFunc[In, Out, P]) (_ Batch[Out, P], err error) {
	defer recoverInto(&err)
	h := s.h
	if h.tracer == nil {
		return guarded(ctx, b, fn)
	}
	info := s.info(worker, b.Seq, b.Rows, b.Bytes)
	info.Batch = b.trace
	tctx := h.tracer.StageStart(ctx, info)
	start := time.Now()
	out, err := guarded(tctx, b, fn)
	h.tracer.StageEnd(tctx, StageEndInfo{StageInfo: info, OutRows: out.Rows, OutBytes: out.Bytes, Start: start, Duration: time.Since(start), Err: err})
	out.trace = b.trace
	if s.kind == KindSource {
		out.trace = tctx
	}
	return out, err
}

// guarded turns a panic in user code into an error, so it never unwinds
// through the framework's goroutines and crashes the process.
func guarded[In, Out, P any](ctx context.Context, b Batch[In, P], fn stageFunc[In, Out, P]) (_ Batch[Out, P], err error) {
	defer recoverInto(&err)
	return fn(ctx, b)
}

func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = &PanicError{Value: r, Stack: debug.Stack()}
	}
}

// send hands v downstream. The non-blocking attempt first keeps the common
// case free of clock reads; only a real wait is timed and reported as
// backpressure. It returns false if the run was cancelled meanwhile.
func send[T, P any](ctx context.Context, rs *runState, s *stage, worker int, ch chan<- Batch[T, P], v Batch[T, P], report bool) bool {
	select {
	case ch <- v:
		return true
	default:
	}
	if !report || s.h.blocked == nil {
		select {
		case ch <- v:
			return true
		case <-ctx.Done():
			return false
		}
	}
	start := time.Now()
	select {
	case ch <- v:
	case <-ctx.Done():
		return false
	}
	if err := reportBlocked(ctx, s.h.blocked, BlockedInfo{StageInfo: s.info(worker, v.Seq, v.Rows, v.Bytes), Blocked: time.Since(start)}); err != nil {
		rs.fail(ctx, s, v.Seq, err)
		return false
	}
	return true
}

func reportBlocked(ctx context.Context, t BackpressureTracer, info BlockedInfo) (err error) {
	defer recoverInto(&err)
	t.StageBlocked(ctx, info)
	return nil
}

func runSource[T, P any](ctx context.Context, rs *runState, s *stage, src Source[T, P], out chan<- Batch[T, P]) {
	defer close(out)
	next := func(ctx context.Context, _ Batch[struct{}, P]) (Batch[T, P], error) { return src.Next(ctx) }
	for seq := uint64(0); ; seq++ {
		// The batch boundary: the only place a soft stop takes effect,
		// also while waiting for a Config.MaxInFlight slot.
		if rs.slots != nil && !stopRequested(rs) {
			select {
			case rs.slots <- struct{}{}:
			case <-rs.stop:
			case <-rs.yield:
			case <-ctx.Done():
			}
		}
		if stopRequested(rs) {
			rs.drained.Store(true)
			return
		}
		if ctx.Err() != nil {
			return
		}
		b, err := invoke(ctx, s, 0, Batch[struct{}, P]{Seq: seq}, next)
		if errors.Is(err, ErrEndOfInput) {
			// A source that ended because it saw Draining was stopped, not
			// finished: a yielded unit must be re-queued, not dropped.
			if stopRequested(rs) {
				rs.drained.Store(true)
			}
			return
		}
		if err != nil {
			rs.fail(ctx, s, seq, fmt.Errorf("read: %w", err))
			return
		}
		b.Seq = seq
		if !send(ctx, rs, s, 0, out, b, true) {
			return
		}
	}
}

func stopRequested(rs *runState) bool {
	select {
	case <-rs.stop:
		return true
	case <-rs.yield:
		return true
	default:
		return false
	}
}

// runPool runs n workers over in. If ordered (and n > 1) the workers feed an
// internal channel and this goroutine re-sequences their output.
func runPool[In, Out, P any](ctx context.Context, rs *runState, s *stage, n int, ordered bool,
	in <-chan Batch[In, P], out chan Batch[Out, P], fnFor func(worker int) stageFunc[In, Out, P]) {
	defer close(out)
	target := out
	if ordered && n > 1 {
		target = make(chan Batch[Out, P], n)
	}
	var workers, all sync.WaitGroup
	for i := range n {
		fn := fnFor(i)
		workers.Go(func() { runWorker(ctx, rs, s, i, in, target, fn, target == out) })
	}
	if target != out {
		all.Go(func() {
			workers.Wait()
			close(target)
		})
		runReorder(ctx, rs, s, target, out, 2*n)
	}
	all.Wait()
	workers.Wait()
}

func runWorker[In, Out, P any](ctx context.Context, rs *runState, s *stage, worker int,
	in <-chan Batch[In, P], out chan<- Batch[Out, P], fn stageFunc[In, Out, P], report bool) {
	for {
		var b Batch[In, P]
		var ok bool
		select {
		case b, ok = <-in:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
		o, err := invoke(ctx, s, worker, b, fn)
		if err != nil {
			rs.fail(ctx, s, b.Seq, err)
			return
		}
		o.Seq, o.Progress = b.Seq, b.Progress
		if o.side == nil {
			o.side = b.side
		}
		if !send(ctx, rs, s, worker, out, o, report) {
			return
		}
	}
}

func runReorder[T, P any](ctx context.Context, rs *runState, s *stage, in <-chan Batch[T, P], out chan<- Batch[T, P], capacity int) {
	r := newReorder[Batch[T, P]](capacity)
	for {
		select {
		case b, ok := <-in:
			if !ok {
				if r.held > 0 {
					rs.fail(ctx, s, r.next, errors.New("batch missing at end of input"))
				}
				return
			}
			if err := r.put(b.Seq, b); err != nil {
				rs.fail(ctx, s, b.Seq, err)
				return
			}
		case <-ctx.Done():
			return
		}
		for {
			b, ok := r.pop()
			if !ok {
				break
			}
			if !send(ctx, rs, s, 0, out, b, true) {
				return
			}
		}
	}
}

func runCommit[T, P any](ctx context.Context, rs *runState, s *stage, in <-chan Batch[T, P], fn CommitFunc[T, P], capacity int) {
	r := newReorder[Batch[T, P]](capacity)
	commit := func(ctx context.Context, b Batch[T, P]) (Batch[T, P], error) { return b, fn(ctx, b) }
	for {
		select {
		case b, ok := <-in:
			if !ok {
				switch {
				case ctx.Err() != nil:
				case r.held > 0:
					rs.fail(ctx, s, r.next, errors.New("batch missing at end of input"))
				default:
					rs.complete.Store(true)
				}
				return
			}
			if err := r.put(b.Seq, b); err != nil {
				rs.fail(ctx, s, b.Seq, err)
				return
			}
		case <-ctx.Done():
			return
		}
		for {
			b, ok := r.pop()
			if !ok {
				break
			}
			// A hard stop or a failure elsewhere forbids further commits, even
			// of batches that are durable: the caller asked to abort.
			if ctx.Err() != nil {
				return
			}
			if _, err := invoke(ctx, s, 0, b, commit); err != nil {
				rs.fail(ctx, s, b.Seq, fmt.Errorf("commit: %w", err))
				return
			}
			if rs.slots != nil {
				<-rs.slots
			}
		}
	}
}
