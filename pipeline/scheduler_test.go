package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

func TestSchedulerRunsMostUrgentFirst(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	var order []string // one worker: units never overlap
	for _, u := range []struct {
		key  string
		prio int
	}{{"stream-reproc", 4}, {"stream-active", 2}, {"snap-reproc", 3}, {"snap-active-a", 1}, {"snap-active-b", 1}} {
		err := s.Submit(pipeline.Unit{Key: u.key, Priority: u.prio, Run: func(context.Context) error {
			order = append(order, u.key)
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if err := wait(t, runAsync(context.Background(), s), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	want := "snap-active-a snap-active-b stream-active snap-reproc stream-reproc"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("ran %q, want %q", got, want)
	}
}

func TestSchedulerBoundsConcurrencyAndReportsStats(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 2})
	release := make(chan struct{})
	started := make(chan struct{}, 6)
	var running, peak atomic.Int32
	for i, kind := range []string{"snapshot", "snapshot", "snapshot", "snapshot", "stream", "stream"} {
		prio := 1
		if kind == "stream" {
			prio = 2
		}
		err := s.Submit(pipeline.Unit{Key: kind + string(rune('a'+i)), Kind: kind, Priority: prio, Run: func(context.Context) error {
			v := running.Add(1)
			for old := peak.Load(); v > old && !peak.CompareAndSwap(old, v); old = peak.Load() {
			}
			started <- struct{}{}
			<-release
			running.Add(-1)
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Submit(pipeline.Unit{Key: "snapshota", Run: func(context.Context) error { return nil }}); err == nil {
		t.Fatal("duplicate key accepted")
	}
	done := runAsync(context.Background(), s)
	<-started
	<-started
	st := s.Stats()
	if st.Running != 2 || st.Pending != 4 {
		t.Fatalf("stats: %d running, %d pending; want 2 and 4", st.Running, st.Pending)
	}
	if k := st.ByKind["snapshot"]; k.Running != 2 || k.Pending != 2 {
		t.Fatalf("snapshot counts %+v, want 2 running 2 pending", k)
	}
	if k := st.ByKind["stream"]; k.Running != 0 || k.Pending != 2 {
		t.Fatalf("stream counts %+v, want 0 running 2 pending", k)
	}
	if k := st.ByPriority[2]; k.Pending != 2 {
		t.Fatalf("priority 2 counts %+v, want 2 pending", k)
	}
	s.Close()
	if err := s.Submit(pipeline.Unit{Key: "late", Run: func(context.Context) error { return nil }}); !errors.Is(err, pipeline.ErrSchedulerClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
	close(release)
	if err := wait(t, done, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak.Load())
	}
	if st := s.Stats(); st.Running != 0 || st.Pending != 0 {
		t.Fatalf("after Run: %+v", st)
	}
}

// resumable is a low-priority unit that runs a real pipeline over total
// batches, committing progress (the next item to read) and resuming from it
// when re-run after a yield.
type resumable struct {
	key        string
	total      int
	latency    time.Duration
	submitted  *atomic.Bool // set just before the urgent unit is submitted
	afterFlag  atomic.Int32 // batches whose read began after submitted was set
	mu         sync.Mutex
	committed  int
	startsFrom []int
	reached    chan struct{} // closed once 3 batches are committed
}

func (u *resumable) run(ctx context.Context) error {
	u.mu.Lock()
	next := u.committed
	u.startsFrom = append(u.startsFrom, next)
	u.mu.Unlock()
	src := pipeline.SourceFunc[int, int](func(context.Context) (pipeline.Batch[int, int], error) {
		if next >= u.total {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		if u.submitted.Load() {
			u.afterFlag.Add(1)
		}
		time.Sleep(u.latency) // a chunk read from a slow cursor
		b := pipeline.Batch[int, int]{Rows: 1, Progress: next + 1, Items: []int{next}}
		next++
		return b, nil
	})
	p := pipeline.New[int](pipeline.Config{Name: u.key})
	pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), pipeline.StageConfig{Name: "commit"},
		func(_ context.Context, b pipeline.Batch[int, int]) error {
			u.mu.Lock()
			defer u.mu.Unlock()
			if b.Items[0] != u.committed {
				return errors.New("item re-read or skipped across a resume")
			}
			u.committed = b.Progress
			if u.committed == 3 {
				close(u.reached)
			}
			return nil
		})
	return p.Run(ctx)
}

// TestSchedulerPreemptsAtBatchBoundary: with two low-priority units filling
// both slots, an urgent unit starts as soon as one of them reaches its next
// batch boundary (at most one more batch read), only one unit yields, and the
// yielded unit later resumes from its committed progress and finishes.
func TestSchedulerPreemptsAtBatchBoundary(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 2})
	var submitted atomic.Bool
	lows := []*resumable{
		{key: "low-a", total: 60, latency: time.Millisecond, submitted: &submitted, reached: make(chan struct{})},
		{key: "low-b", total: 60, latency: time.Millisecond, submitted: &submitted, reached: make(chan struct{})},
	}
	for _, u := range lows {
		if err := s.Submit(pipeline.Unit{Key: u.key, Kind: "snapshot", Priority: 4, Run: u.run}); err != nil {
			t.Fatal(err)
		}
	}
	done := runAsync(context.Background(), s)
	for _, u := range lows {
		<-u.reached
	}
	urgentStarted := make(chan [2]int32, 1)
	submitted.Store(true)
	err := s.Submit(pipeline.Unit{Key: "urgent", Kind: "snapshot", Priority: 1, Run: func(context.Context) error {
		urgentStarted <- [2]int32{lows[0].afterFlag.Load(), lows[1].afterFlag.Load()}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	atStart := <-urgentStarted
	s.Close()
	if err := wait(t, done, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	yielded := -1
	for i, u := range lows {
		if u.committed != u.total {
			t.Fatalf("%s committed %d of %d", u.key, u.committed, u.total)
		}
		switch len(u.startsFrom) {
		case 1:
		case 2:
			if yielded >= 0 {
				t.Fatal("both low-priority units yielded; one free slot was needed")
			}
			yielded = i
		default:
			t.Fatalf("%s ran %d times", u.key, len(u.startsFrom))
		}
	}
	if yielded < 0 {
		t.Fatal("no unit yielded")
	}
	y := lows[yielded]
	if atStart[yielded] > 1 {
		t.Fatalf("%s read %d batches after the urgent unit was submitted, want at most 1", y.key, atStart[yielded])
	}
	if y.startsFrom[1] < 3 {
		t.Fatalf("%s resumed from %d, want its committed progress (>= 3)", y.key, y.startsFrom[1])
	}
}

func TestSchedulerUnitFailureCancelsOthers(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 2})
	blocked := make(chan struct{})
	var cancelled atomic.Bool
	_ = s.Submit(pipeline.Unit{Key: "stream", Priority: 2, Run: func(ctx context.Context) error {
		close(blocked)
		<-ctx.Done()
		cancelled.Store(true)
		return ctx.Err()
	}})
	_ = s.Submit(pipeline.Unit{Key: "broken", Priority: 2, Run: func(context.Context) error {
		<-blocked
		return errBoom
	}})
	err := wait(t, runAsync(context.Background(), s), 10*time.Second)
	if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "unit broken") {
		t.Fatalf("got %v, want errBoom wrapped with the unit key", err)
	}
	if !cancelled.Load() {
		t.Fatal("the other unit was not cancelled before Run returned")
	}
}

func TestSchedulerRecoversPanic(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{})
	_ = s.Submit(pipeline.Unit{Key: "p", Run: func(context.Context) error { panic("unit exploded") }})
	s.Close()
	err := wait(t, runAsync(context.Background(), s), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "unit exploded") {
		t.Fatalf("got %v, want the panic as an error", err)
	}
}

// TestSchedulerStopDrainsRunningPipelines: the soft shutdown asks running
// pipelines to yield; each commits what it read and Run returns nil.
func TestSchedulerStopDrainsRunningPipelines(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 2})
	var wg sync.WaitGroup
	results := make([]error, 2)
	reads := make([]*endless, 2)
	commits := make([]*committer, 2)
	for i := range 2 {
		reads[i], commits[i] = &endless{}, &committer{}
		wg.Add(1)
		reached := false
		_ = s.Submit(pipeline.Unit{Key: string(rune('a' + i)), Priority: 2, Run: func(ctx context.Context) error {
			p := pipeline.New[int](pipeline.Config{Name: "stream"})
			pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[int, int](reads[i])),
				pipeline.StageConfig{Name: "commit"}, func(ctx context.Context, b pipeline.Batch[int, int]) error {
					if !reached && b.Seq == 5 {
						reached = true
						wg.Done()
					}
					return commits[i].commit(ctx, b)
				})
			results[i] = p.Run(ctx)
			return results[i]
		}})
	}
	done := runAsync(context.Background(), s)
	wg.Wait()
	s.Stop()
	if err := wait(t, done, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if !errors.Is(results[i], pipeline.ErrYielded) {
			t.Fatalf("unit %d pipeline returned %v, want ErrYielded", i, results[i])
		}
		if reads[i].count() != commits[i].count() {
			t.Fatalf("unit %d read %d batches, committed %d", i, reads[i].count(), commits[i].count())
		}
	}
	if st := s.Stats(); st.Pending != 2 || st.Running != 0 {
		t.Fatalf("after Stop: %+v, want the 2 yielded units pending", st)
	}
}

func TestSchedulerHardStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{})
	started := make(chan struct{})
	_ = s.Submit(pipeline.Unit{Key: "s", Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}})
	done := runAsync(ctx, s)
	<-started
	cancel()
	if err := wait(t, done, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestYieldWakesSourceBlockedInNext: an idle stream source waiting inside
// Next learns about a yield through Draining, so preemption does not wait
// for the next replication message.
func TestYieldWakesSourceBlockedInNext(t *testing.T) {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	idle := make(chan struct{})
	var results []error // the unit's runs never overlap
	_ = s.Submit(pipeline.Unit{Key: "stream", Kind: "stream", Priority: 2, Run: func(ctx context.Context) error {
		firstRun, calls := len(results) == 0, 0
		src := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
			calls++
			switch {
			case calls == 1:
				return pipeline.Batch[int, int]{Progress: 1}, nil
			case !firstRun:
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			}
			close(idle)
			select {
			case <-pipeline.Draining(ctx):
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			case <-ctx.Done():
				return pipeline.Batch[int, int]{}, ctx.Err()
			}
		})
		p := pipeline.New[int](pipeline.Config{Name: "stream"})
		pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), pipeline.StageConfig{Name: "commit"},
			func(context.Context, pipeline.Batch[int, int]) error { return nil })
		err := p.Run(ctx)
		results = append(results, err)
		return err
	}})
	done := runAsync(context.Background(), s)
	<-idle
	snapshotRan := make(chan struct{})
	_ = s.Submit(pipeline.Unit{Key: "snapshot", Kind: "snapshot", Priority: 1, Run: func(context.Context) error {
		close(snapshotRan)
		return nil
	}})
	<-snapshotRan
	s.Close()
	if err := wait(t, done, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || !errors.Is(results[0], pipeline.ErrYielded) || results[1] != nil {
		t.Fatalf("stream runs returned %v, want [ErrYielded, nil]", results)
	}
}
