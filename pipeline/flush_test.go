package pipeline_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
)

// overlapRun runs n batches through a source with read latency r and a
// flush stage with `writers` writers of latency l, both modelling slow I/O
// with sleeps. It returns the wall time and the highest number of reads and
// flushes seen in progress at the same moment.
type overlapRun struct {
	elapsed    time.Duration
	maxBusy    int32 // reads + flushes in progress at once
	maxFlushes int32 // flushes in progress at once
}

func runOverlap(t *testing.T, n int, r, l time.Duration, writers int) overlapRun {
	t.Helper()
	var busy, flushing atomic.Int32
	var res overlapRun
	enter := func(c *atomic.Int32, max *int32) {
		v := c.Add(1)
		for {
			old := atomic.LoadInt32(max)
			if v <= old || atomic.CompareAndSwapInt32(max, old, v) {
				return
			}
		}
	}
	read := 0
	src := pipeline.SourceFunc[int, int](func(context.Context) (pipeline.Batch[int, int], error) {
		if read == n {
			return pipeline.Batch[int, int]{}, pipeline.ErrEndOfInput
		}
		enter(&busy, &res.maxBusy)
		time.Sleep(r) // read latency (slow cursor), not synchronisation
		busy.Add(-1)
		read++
		return pipeline.Batch[int, int]{Rows: 1000, Progress: read}, nil
	})
	ws := make([]pipeline.Writer[int, int], writers)
	for i := range ws {
		ws[i] = pipeline.WriterFunc[int, int](func(context.Context, pipeline.Batch[int, int]) error {
			enter(&busy, &res.maxBusy)
			enter(&flushing, &res.maxFlushes)
			time.Sleep(l) // flush latency (slow storage), not synchronisation
			flushing.Add(-1)
			busy.Add(-1)
			return nil
		})
	}
	sum := pipeline.NewSummary()
	c := &committer{}
	p := pipeline.New[int](pipeline.Config{Name: "overlap", Tracer: sum})
	pipeline.Commit(pipeline.Flush(pipeline.From(p, pipeline.StageConfig{Name: "read"}, src),
		pipeline.StageConfig{Name: "write"}, ws), pipeline.StageConfig{Name: "commit"}, c.commit)
	start := time.Now()
	if err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	res.elapsed = time.Since(start)
	if c.count() != n {
		t.Fatalf("committed %d of %d batches", c.count(), n)
	}
	var buf bytes.Buffer
	if err := sum.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("R=%v L=%v writers=%d n=%d: %v\n%s", r, l, writers, n, res.elapsed, buf.String())
	return res
}

// TestFlushOverlapsRead: with equal read and flush latency the run takes
// about max(L,R)·n, not (L+R)·n, because batch k is flushed while k+1 is read.
func TestFlushOverlapsRead(t *testing.T) {
	const n, lat = 25, 8 * time.Millisecond
	res := runOverlap(t, n, lat, lat, 2)
	if res.maxBusy < 2 {
		t.Fatalf("never saw a read and a flush in progress together (max %d)", res.maxBusy)
	}
	sequential := 2 * lat * n
	if res.elapsed > sequential*3/4 {
		t.Fatalf("took %v; sequential would be %v and pipelined about %v", res.elapsed, sequential, lat*n)
	}
}

// TestTwoWritersHalveFlushBoundRun: when flushing is the bottleneck (L = 3R,
// as the seed's profile found), a second writer nearly halves the run, which
// one writer alone cannot do however well it overlaps with reading.
func TestTwoWritersHalveFlushBoundRun(t *testing.T) {
	const n, r, l = 20, 4 * time.Millisecond, 12 * time.Millisecond
	one := runOverlap(t, n, r, l, 1)
	two := runOverlap(t, n, r, l, 2)
	if two.maxFlushes != 2 {
		t.Fatalf("two writers never flushed at the same time (max %d)", two.maxFlushes)
	}
	if one.elapsed < l*n {
		t.Fatalf("one writer took %v, less than the %v its flushes alone need", one.elapsed, l*n)
	}
	if bound := l * n * 3 / 4; two.elapsed > bound {
		t.Fatalf("two writers took %v, want < %v (one writer: %v)", two.elapsed, bound, one.elapsed)
	}
}
