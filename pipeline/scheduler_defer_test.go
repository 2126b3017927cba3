package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

// TestSchedulerDeferredUnitFreesItsWorker: a unit that cannot run now (its
// work is claimed elsewhere) returns Defer; its one worker takes the less
// urgent unit meanwhile, and the deferred unit runs again — not before
// its delay — and finishes. Defer is not a failure.
func TestSchedulerDeferredUnitFreesItsWorker(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	const delay = 50 * time.Millisecond
	var mu sync.Mutex
	var order []string
	var deferredAt, retriedAt time.Time
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	attempts := 0
	if err := s.Submit(pipeline.Unit{Key: "urgent", Priority: 1, Run: func(context.Context) error {
		attempts++
		if attempts == 1 {
			note("urgent deferred")
			deferredAt = time.Now()
			return pipeline.Defer(delay, errors.New("claimed by another process"))
		}
		retriedAt = time.Now()
		note("urgent done")
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(pipeline.Unit{Key: "later", Priority: 2, Run: func(context.Context) error {
		note("later done")
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := wait(t, runAsync(context.Background(), s), 10*time.Second); err != nil {
		t.Fatalf("a deferred unit failed the scheduler: %v", err)
	}
	if got, want := strings.Join(order, ", "), "urgent deferred, later done, urgent done"; got != want {
		t.Fatalf("ran %q, want %q", got, want)
	}
	if d := retriedAt.Sub(deferredAt); d < delay {
		t.Fatalf("deferred unit ran again after %s, before its delay %s", d, delay)
	}
	if !errors.Is(pipeline.Defer(time.Second, nil), pipeline.ErrDeferred) {
		t.Fatal("Defer's error does not match ErrDeferred")
	}
}

// TestSchedulerDeferredUnitDoesNotPreempt: the urgent unit preempts the
// running one, then finds its work claimed elsewhere and defers; the less
// urgent unit runs again and is not asked to yield while the urgent one is
// held back, only once its delay is over.
func TestSchedulerDeferredUnitDoesNotPreempt(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	const delay = 100 * time.Millisecond
	lowStarted := make(chan struct{}, 2)
	var deferredAt time.Time
	var yieldedAfter time.Duration
	lowRuns := 0
	if err := s.Submit(pipeline.Unit{Key: "low", Priority: 3, Run: func(ctx context.Context) error {
		lowRuns++
		lowStarted <- struct{}{}
		err := runUntilYield(ctx)
		if lowRuns == 1 {
			return err // ErrYielded, to the urgent unit's first attempt
		}
		yieldedAfter = time.Since(deferredAt)
		return nil // finished at the second yield request
	}}); err != nil {
		t.Fatal(err)
	}
	errc := runAsync(context.Background(), s)
	<-lowStarted
	attempts := 0
	if err := s.Submit(pipeline.Unit{Key: "urgent", Priority: 1, Run: func(context.Context) error {
		attempts++
		if attempts == 1 {
			deferredAt = time.Now()
			return pipeline.Defer(delay, errors.New("claimed elsewhere"))
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := wait(t, errc, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if lowRuns != 2 || attempts != 2 {
		t.Fatalf("low ran %d times, urgent %d; want 2 and 2", lowRuns, attempts)
	}
	if yieldedAfter < delay {
		t.Fatalf("the running unit was asked to yield %s after the urgent unit was deferred for %s", yieldedAfter, delay)
	}
}

// TestSchedulerDueUnitWithoutWorkerDoesNotSpin: a deferred unit that
// becomes due while its only worker is busy (with a unit that does not
// yield) waits for the worker without the scheduler's loop spinning: the
// process burns (almost) no CPU meanwhile. It spun at 100 % of a core
// until the worker was free (a timer armed for the past), which in
// several processes sharing a snapshot took half of each process's CPU.
func TestSchedulerDueUnitWithoutWorkerDoesNotSpin(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	const busy = 400 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{})
	attempts := 0
	if err := s.Submit(pipeline.Unit{Key: "deferred", Priority: 1, Run: func(context.Context) error {
		attempts++
		if attempts == 1 {
			return pipeline.Defer(time.Millisecond, errors.New("claimed by another process"))
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(pipeline.Unit{Key: "busy", Priority: 2, Run: func(context.Context) error {
		close(started)
		<-release // ignores yield requests
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	done := runAsync(context.Background(), s)
	<-started
	before := cpuTime(t)
	time.Sleep(busy) // the scenario: the worker stays busy this long
	used := cpuTime(t) - before
	close(release)
	if err := wait(t, done, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("the deferred unit ran %d times, want 2", attempts)
	}
	if used > busy/4 {
		t.Fatalf("the process used %s of CPU in %s while a due unit waited for a worker: the scheduler spins", used, busy)
	}
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
