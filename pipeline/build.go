package pipeline

import (
	"context"
	"fmt"
)

// Stream is the typed output of a stage, to be consumed by exactly one next
// stage. It only exists while wiring; batches travel over its channel at run
// time.
type Stream[T, P any] struct {
	p     *Pipeline[P]
	ch    chan Batch[T, P]
	from  string
	taken bool
}

// From adds the pipeline's source. A pipeline has exactly one source, because
// sequence numbers, and therefore ordered commit, are defined by one reader.
func From[T, P any](p *Pipeline[P], cfg StageConfig, src Source[T, P]) *Stream[T, P] {
	if p == nil {
		return nil
	}
	s := p.addStage(cfg, KindSource, 1)
	if p.source {
		p.errorf("stage %s: pipeline already has a source", cfg.Name)
	}
	p.source = true
	if src == nil {
		p.errorf("stage %s: nil source", cfg.Name)
	}
	out := newStream[T](p, cfg)
	p.runners = append(p.runners, func(ctx context.Context, rs *runState) {
		runSource(ctx, rs, s, src, out.ch)
	})
	return out
}

// Process adds a stage that transforms every batch with fn, on
// cfg.Workers goroutines. Output order is arbitrary unless cfg.Ordered.
func Process[In, Out, P any](in *Stream[In, P], cfg StageConfig, fn ProcessFunc[In, Out, P]) *Stream[Out, P] {
	if fn == nil {
		return ProcessWorkers[In, Out, P](in, cfg, nil)
	}
	return ProcessWorkers(in, cfg, func(int) ProcessFunc[In, Out, P] { return fn })
}

// ProcessWorkers is Process with one function per worker goroutine: newFn(i)
// is called once, before the run, for worker i, so each worker can own
// scratch state (an evaluator, reusable buffers) without locking.
func ProcessWorkers[In, Out, P any](in *Stream[In, P], cfg StageConfig, newFn func(worker int) ProcessFunc[In, Out, P]) *Stream[Out, P] {
	if in == nil {
		return nil
	}
	p := in.p
	n := max(cfg.Workers, 1)
	s := p.addStage(cfg, KindProcess, n)
	src := in.take(cfg.Name)
	fns := make([]ProcessFunc[In, Out, P], n)
	for i := range fns {
		if newFn != nil {
			fns[i] = newFn(i)
		}
		if fns[i] == nil {
			p.errorf("stage %s: nil ProcessFunc", cfg.Name)
			break
		}
	}
	out := newStream[Out](p, cfg)
	p.runners = append(p.runners, func(ctx context.Context, rs *runState) {
		runPool(ctx, rs, s, n, cfg.Ordered, src, out.ch, func(i int) func(context.Context, Batch[In, P]) (Batch[Out, P], error) {
			return fns[i]
		})
	})
	return out
}

// Flush adds the sink write stage: writer i runs on its own goroutine, so
// with two writers batch k can be written on one while batch k+1 is written
// on the other, and both overlap with the stages upstream reading and
// evaluating k+2. Batches pass through unchanged once their writer returned,
// i.e. once they are durable. Order is arbitrary unless cfg.Ordered; the
// Commit stage restores it either way. Writers run concurrently, so batch k+1
// may become durable before batch k: a sink whose writes must apply in Seq
// order (later changes of one row overwriting earlier ones) has to make them
// order-independent itself, for example with version or op-id guards, or use
// a single writer.
func Flush[T, P any](in *Stream[T, P], cfg StageConfig, writers []Writer[T, P]) *Stream[T, P] {
	if in == nil {
		return nil
	}
	p := in.p
	s := p.addStage(cfg, KindFlush, len(writers))
	src := in.take(cfg.Name)
	if len(writers) == 0 {
		p.errorf("stage %s: no writers", cfg.Name)
	}
	for i, w := range writers {
		if w == nil {
			p.errorf("stage %s: writer %d is nil", cfg.Name, i)
		}
	}
	out := newStream[T](p, cfg)
	p.runners = append(p.runners, func(ctx context.Context, rs *runState) {
		runPool(ctx, rs, s, len(writers), cfg.Ordered, src, out.ch, func(i int) func(context.Context, Batch[T, P]) (Batch[T, P], error) {
			w := writers[i]
			return func(ctx context.Context, b Batch[T, P]) (Batch[T, P], error) {
				if err := w.Write(ctx, b); err != nil {
					return b, fmt.Errorf("write: %w", err)
				}
				return b, nil
			}
		})
	})
	return out
}

// Commit ends the pipeline with the ordered progress commit: fn is called
// for every batch strictly in Seq order, each only after that batch and all
// earlier ones came out of the previous stage (for a pipeline with a Flush
// stage: after they are durable). Commit is not called after a failure or a
// hard stop.
func Commit[T, P any](in *Stream[T, P], cfg StageConfig, fn CommitFunc[T, P]) {
	if in == nil {
		return
	}
	p := in.p
	s := p.addStage(cfg, KindCommit, 1)
	src := in.take(cfg.Name)
	if p.commit {
		p.errorf("stage %s: pipeline already has a commit stage", cfg.Name)
	}
	p.commit = true
	if fn == nil {
		p.errorf("stage %s: nil CommitFunc", cfg.Name)
	}
	p.runners = append(p.runners, func(ctx context.Context, rs *runState) {
		runCommit(ctx, rs, s, src, fn, p.inflight)
	})
}

func (p *Pipeline[P]) errorf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *Pipeline[P]) addStage(cfg StageConfig, kind StageKind, workers int) *stage {
	switch {
	case p.ran.Load():
		p.errorf("stage %s: added after Run", cfg.Name)
	case cfg.Name == "":
		p.errorf("%s stage without a name", kind)
	case p.names[cfg.Name]:
		p.errorf("stage %s: duplicate stage name", cfg.Name)
	}
	p.names[cfg.Name] = true
	p.inflight += workers + p.depth(cfg)
	return &stage{h: &p.hooks, name: cfg.Name, kind: kind}
}

func (p *Pipeline[P]) depth(cfg StageConfig) int {
	if cfg.Depth > 0 {
		return cfg.Depth
	}
	return p.cfg.Depth
}

func newStream[T, P any](p *Pipeline[P], cfg StageConfig) *Stream[T, P] {
	p.dangling[cfg.Name] = true
	return &Stream[T, P]{p: p, ch: make(chan Batch[T, P], p.depth(cfg)), from: cfg.Name}
}

// take hands the stream's channel to the consuming stage, once.
func (s *Stream[T, P]) take(consumer string) <-chan Batch[T, P] {
	if s.taken {
		s.p.errorf("stage %s: output of stage %s is already consumed", consumer, s.from)
	}
	s.taken = true
	delete(s.p.dangling, s.from)
	return s.ch
}
