package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/syncpipe/syncpipe/pipeline"
)

// memSink is a custom sink. A real one would hold a storage connection and
// return from Write only once the batch is durable.
type memSink struct{ rows []string }

func (s *memSink) Write(_ context.Context, b pipeline.Batch[string, int]) error {
	s.rows = append(s.rows, b.Items...)
	return nil
}

// A three-stage pipeline: read chunks, evaluate them on two workers, write
// them to a custom sink, and commit progress in order.
func Example() {
	p := pipeline.New[int](pipeline.Config{Name: "example"})
	chunk := 0
	rows := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.SourceFunc[int, int](
		func(context.Context) (pipeline.Batch[int, int], error) {
			if chunk == 3 {
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			}
			chunk++
			return pipeline.Batch[int, int]{Rows: 2, Progress: chunk, Items: []int{2 * chunk, 2*chunk + 1}}, nil
		}))
	ops := pipeline.Process(rows, pipeline.StageConfig{Name: "eval", Workers: 2, Ordered: true},
		func(_ context.Context, b pipeline.Batch[int, int]) (pipeline.Batch[string, int], error) {
			out := make([]string, len(b.Items))
			for i, v := range b.Items {
				out[i] = fmt.Sprintf("op%d", v)
			}
			return pipeline.Derive(b, out), nil
		})
	sink := &memSink{}
	flushed := pipeline.Flush(ops, pipeline.StageConfig{Name: "write"}, []pipeline.Writer[string, int]{sink})
	pipeline.Commit(flushed, pipeline.StageConfig{Name: "commit"}, func(_ context.Context, b pipeline.Batch[string, int]) error {
		fmt.Println("committed chunk", b.Progress)
		return nil
	})
	if err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	fmt.Println(strings.Join(sink.rows, " "))
	// Output:
	// committed chunk 1
	// committed chunk 2
	// committed chunk 3
	// op2 op3 op4 op5 op6 op7
}

// Units run most urgent first; a Pipeline inside a unit yields by itself
// when more urgent work arrives.
func ExampleScheduler() {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	for _, u := range []pipeline.Unit{
		{Key: "stream of reprocessing group", Kind: "stream", Priority: 4},
		{Key: "snapshot of active group", Kind: "snapshot", Priority: 1},
		{Key: "stream of active group", Kind: "stream", Priority: 2},
	} {
		u.Run = func(context.Context) error {
			fmt.Println("run", u.Key)
			return nil
		}
		if err := s.Submit(u); err != nil {
			fmt.Println(err)
		}
	}
	s.Close()
	if err := s.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// run snapshot of active group
	// run stream of active group
	// run stream of reprocessing group
}

// A Summary shows where the time of a run went; combine it with other
// tracers through MultiTracer.
func ExampleSummary() {
	sum := pipeline.NewSummary()
	p := pipeline.New[int](pipeline.Config{Name: "timed", Tracer: sum})
	pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, countSource(10)),
		pipeline.StageConfig{Name: "commit"}, func(context.Context, pipeline.Batch[int, int]) error { return nil })
	if err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	_ = sum.WriteTable(os.Stdout) // timings vary, so this example has no fixed output
}

// A source that waits for input between batches (a queue, a webhook, an
// idle replication stream) selects on Draining, so that a soft stop (Stop,
// or a scheduler asking its unit to yield) does not wait for the next
// message: every batch already read still commits.
func ExampleDraining() {
	events := make(chan int, 2)
	events <- 1
	events <- 2
	idle := make(chan struct{})
	stoppedIdle := false
	src := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
		select {
		case e := <-events:
			return pipeline.Batch[int, int]{Rows: 1, Items: []int{e}, Progress: e}, nil
		default:
		}
		close(idle) // nothing queued: wait for the next event or a stop
		select {
		case e := <-events:
			return pipeline.Batch[int, int]{Rows: 1, Items: []int{e}, Progress: e}, nil
		case <-pipeline.Draining(ctx):
			stoppedIdle = true
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		case <-ctx.Done():
			return pipeline.Batch[int, int]{}, ctx.Err()
		}
	})
	p := pipeline.New[int](pipeline.Config{Name: "events"})
	pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), pipeline.StageConfig{Name: "commit"},
		func(_ context.Context, b pipeline.Batch[int, int]) error {
			fmt.Println("committed event", b.Progress)
			return nil
		})
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	<-idle
	p.Stop()
	err := <-done
	fmt.Println("run ended:", err, "- stopped while waiting:", stoppedIdle)
	// Output:
	// committed event 1
	// committed event 2
	// run ended: <nil> - stopped while waiting: true
}

// Stop shuts a scheduler down gracefully, as on SIGTERM: no further unit
// starts, and a running unit's pipeline stops reading and commits what it
// has read before Run returns.
func ExampleScheduler_Stop() {
	s := pipeline.NewScheduler(pipeline.SchedulerConfig{Workers: 1})
	waiting := make(chan struct{})
	_ = s.Submit(pipeline.Unit{Key: "stream", Kind: "stream", Priority: 2, Run: func(ctx context.Context) error {
		read := 0
		src := pipeline.SourceFunc[int, int](func(ctx context.Context) (pipeline.Batch[int, int], error) {
			if read < 2 {
				read++
				return pipeline.Batch[int, int]{Rows: 1, Items: []int{read}, Progress: read}, nil
			}
			close(waiting) // idle: nothing more to read for now
			select {
			case <-pipeline.Draining(ctx):
				return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
			case <-ctx.Done():
				return pipeline.Batch[int, int]{}, ctx.Err()
			}
		})
		p := pipeline.New[int](pipeline.Config{Name: "stream"})
		pipeline.Commit(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), pipeline.StageConfig{Name: "commit"},
			func(_ context.Context, b pipeline.Batch[int, int]) error {
				fmt.Println("committed", b.Progress)
				return nil
			})
		return p.Run(ctx)
	}})
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	<-waiting
	s.Stop()
	fmt.Println("scheduler ended:", <-done)
	// Output:
	// committed 1
	// committed 2
	// scheduler ended: <nil>
}
