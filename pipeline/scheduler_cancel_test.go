package pipeline

import (
	"context"
	"testing"
	"time"
)

// TestSchedulerReturnsPromptlyOnCancel cancels the run context just as the
// last units finish, many times: Run must return every time. (A parent
// context closes its Done channel before it cancels its children, which
// once left Run waiting forever in this window.)
func TestSchedulerReturnsPromptlyOnCancel(t *testing.T) {
	for i := range 3000 {
		ctx, cancel := context.WithCancel(context.Background())
		s := NewScheduler(SchedulerConfig{Workers: 2})
		ran := make(chan struct{}, 2)
		for _, key := range []string{"a", "b"} {
			if err := s.Submit(Unit{Key: key, Run: func(context.Context) error { ran <- struct{}{}; return nil }}); err != nil {
				t.Fatal(err)
			}
		}
		errc := make(chan error, 1)
		go func() { errc <- s.Run(ctx) }()
		<-ran
		if i%2 == 0 {
			<-ran
		}
		cancel()
		select {
		case <-errc:
		case <-time.After(10 * time.Second):
			t.Fatalf("iteration %d: Run did not return after its context was cancelled", i)
		}
	}
}
