package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sourcegraph/conc/panics"
)

// ErrSchedulerClosed is returned by Submit after Close or Stop.
var ErrSchedulerClosed = errors.New("scheduler closed")

// ErrUnitExists is returned by Submit for a key already pending or running.
var ErrUnitExists = errors.New("already pending or running")

// Unit is one long-running piece of work for the Scheduler, such as the
// snapshot of one table range or the stream of one replication group.
type Unit struct {
	// Key identifies the unit; a key can be pending or running only once.
	Key string
	// Kind groups units for metrics, for example "snapshot" or "stream".
	Kind string
	// Priority orders pending units: lower runs first (SPEC §5: 1 snapshot
	// of the active group, 2 its stream, 3 snapshot of a reprocessing group,
	// 4 its stream). Equal priorities run in submission order.
	Priority int
	// Run does the work. Its ctx is cancelled on a hard stop of the
	// scheduler. A Pipeline run under ctx yields by itself when more urgent
	// work needs the slot (its Run returns ErrYielded); a unit that runs no
	// pipeline is not preempted and keeps its slot until it returns. Return
	// nil when the unit is finished, an error matching ErrYielded to be
	// re-queued, one made by Defer to be re-queued and held back for a
	// while (its worker takes other work meanwhile), or any other error to
	// stop the scheduler.
	Run func(ctx context.Context) error
}

// SchedulerConfig sizes a Scheduler.
type SchedulerConfig struct {
	// Workers is the maximum number of units running at once (default 2).
	Workers int
}

// Scheduler runs Units with at most Workers at a time, most urgent first.
// When a unit more urgent than some running unit is pending and every slot
// is busy, the least urgent running unit is asked to yield: the Pipeline it
// runs stops reading (sources blocked in Next see Draining) and returns
// ErrYielded once what it read is committed. The request is made before
// Submit returns, so the unit sees it at its very next batch boundary.
type Scheduler struct {
	workers int
	wake    chan struct{}

	mu       sync.Mutex
	pending  []*entry // sorted by (Priority, order)
	running  map[*entry]struct{}
	keys     map[string]bool
	order    uint64
	starts   uint64
	closed   bool
	stopping bool
	started  bool
}

type entry struct {
	unit       Unit
	notBefore  time.Time // set by a Defer: not started again before
	order      uint64    // submission order, kept across yields so a unit keeps its place
	start      uint64    // start counter of the current attempt
	yield      context.CancelFunc
	yieldAsked bool
}

type unitResult struct {
	e   *entry
	err error
}

// NewScheduler returns an idle scheduler; units may be submitted before Run.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	return &Scheduler{
		workers: cfg.Workers,
		wake:    make(chan struct{}, 1),
		running: map[*entry]struct{}{},
		keys:    map[string]bool{},
	}
}

// Submit queues a unit. It may preempt a running unit (see Scheduler).
func (s *Scheduler) Submit(u Unit) error {
	if u.Run == nil {
		return fmt.Errorf("submit unit %q: nil Run", u.Key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("submit unit %q: %w", u.Key, ErrSchedulerClosed)
	}
	if s.keys[u.Key] {
		return fmt.Errorf("submit unit %q: %w", u.Key, ErrUnitExists)
	}
	s.keys[u.Key] = true
	s.order++
	s.enqueueLocked(&entry{unit: u, order: s.order})
	s.preemptLocked()
	s.signal()
	return nil
}

// Close stops accepting units; Run returns once every submitted unit has
// finished.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

// Stop is the soft shutdown: no further units start, every running unit is
// asked to yield, and Run returns nil once they have returned. Units that
// yielded stay pending (visible in Stats) but do not run again.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	s.closed, s.stopping = true, true
	for e := range s.running {
		s.askYieldLocked(e)
	}
	s.mu.Unlock()
	s.signal()
}

// Run dispatches units until Close (all done), Stop (running ones yielded),
// a unit failure (returned, wrapped with the unit key, after cancelling the
// others) or ctx cancellation (hard stop: units' contexts are cancelled). It
// returns only after every unit goroutine has exited.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("run scheduler: already running")
	}
	s.started = true
	s.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan unitResult)
	// Watch runCtx, not ctx: a parent closes its Done channel before it
	// cancels its children, so after waking on ctx.Done() runCtx.Err() can
	// still be nil for a moment, and the loop would block for good.
	done := runCtx.Done()
	var failed error
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now() // one instant for dispatching and for the timer, so no due unit falls between
		if failed == nil && runCtx.Err() == nil {
			s.dispatchLocked(runCtx, results, now)
		}
		idle := len(s.running) == 0
		finished := failed != nil || runCtx.Err() != nil || s.stopping || (s.closed && len(s.pending) == 0)
		next := s.nextReadyLocked(now)
		s.mu.Unlock()
		if idle && finished {
			break
		}
		var deferred <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			deferred = timer.C
		}
		select {
		case <-deferred:
		case <-s.wake:
		case <-done:
			done = nil // keep waiting for the units, without spinning
		case r := <-results:
			if err := s.finish(runCtx, r); err != nil && failed == nil {
				failed = err
				cancel()
			}
		}
	}
	if failed != nil {
		return failed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("run scheduler: %w", err)
	}
	return nil
}

// nextReadyLocked returns when the earliest deferred pending unit that
// may not start yet at now may, zero if none waits. A unit already due
// that could not start (no worker free) needs no timer: a worker that
// frees up wakes Run, and arming one for a past time would spin the loop
// until then.
func (s *Scheduler) nextReadyLocked(now time.Time) time.Time {
	var next time.Time
	for _, e := range s.pending {
		if e.notBefore.After(now) && (next.IsZero() || e.notBefore.Before(next)) {
			next = e.notBefore
		}
	}
	return next
}

// readyLocked returns the index of the most urgent pending unit that may
// start now, -1 if none.
func (s *Scheduler) readyLocked(now time.Time) int {
	for i, e := range s.pending {
		if e.notBefore.IsZero() || !e.notBefore.After(now) {
			return i
		}
	}
	return -1
}

func (s *Scheduler) dispatchLocked(ctx context.Context, results chan<- unitResult, now time.Time) {
	for len(s.running) < s.workers && !s.stopping {
		i := s.readyLocked(now)
		if i < 0 {
			break
		}
		e := s.pending[i]
		s.pending = slices.Delete(s.pending, i, i+1)
		e.notBefore = time.Time{}
		s.starts++
		e.start = s.starts
		yctx, ycancel := context.WithCancel(context.Background())
		e.yield, e.yieldAsked = ycancel, false
		s.running[e] = struct{}{}
		uctx := context.WithValue(ctx, yieldKey{}, yctx)
		go func() {
			var err error
			if r := panics.Try(func() { err = e.unit.Run(uctx) }); r != nil {
				err = r.AsError()
			}
			results <- unitResult{e: e, err: err}
		}()
	}
	s.preemptLocked()
}

// finish books a returned unit and reports a failure that should stop Run.
func (s *Scheduler) finish(ctx context.Context, r unitResult) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, r.e)
	r.e.yield()
	switch {
	case r.err == nil:
		delete(s.keys, r.e.unit.Key)
	case errors.Is(r.err, ErrYielded):
		s.enqueueLocked(r.e)
	case errors.Is(r.err, ErrDeferred):
		if d, ok := errors.AsType[*deferError](r.err); ok {
			r.e.notBefore = time.Now().Add(d.after)
		}
		s.enqueueLocked(r.e)
	case ctx.Err() != nil:
		// Cancelled by a hard stop or by another unit's failure: not a cause.
		delete(s.keys, r.e.unit.Key)
	default:
		delete(s.keys, r.e.unit.Key)
		return fmt.Errorf("unit %s: %w", r.e.unit.Key, r.err)
	}
	return nil
}

func (s *Scheduler) enqueueLocked(e *entry) {
	i, _ := slices.BinarySearchFunc(s.pending, e, compareEntries)
	s.pending = slices.Insert(s.pending, i, e)
}

func compareEntries(a, b *entry) int {
	if c := cmp.Compare(a.unit.Priority, b.unit.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.order, b.order)
}

// preemptLocked asks running units to yield while a more urgent unit waits
// for a slot. Each pending unit is matched with at most one victim, victims
// that already yield count as slots about to free up, and the victim is the
// least urgent running unit (the most recently started among equals, as it
// has the least progress to lose).
func (s *Scheduler) preemptLocked() {
	if len(s.pending) == 0 || len(s.running) < s.workers {
		return
	}
	var victims []*entry
	freeing := 0
	for e := range s.running {
		if e.yieldAsked {
			freeing++
		} else {
			victims = append(victims, e)
		}
	}
	slices.SortFunc(victims, func(a, b *entry) int {
		if c := cmp.Compare(b.unit.Priority, a.unit.Priority); c != 0 {
			return c
		}
		return cmp.Compare(b.start, a.start)
	})
	now := time.Now()
	i := -1
	for _, p := range s.pending {
		if p.notBefore.After(now) {
			continue // deferred: it cannot take a slot now
		}
		i++
		if i < freeing {
			continue
		}
		v := i - freeing
		if v >= len(victims) || victims[v].unit.Priority <= p.unit.Priority {
			return
		}
		s.askYieldLocked(victims[v])
	}
}

func (s *Scheduler) askYieldLocked(e *entry) {
	e.yieldAsked = true
	e.yield()
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
