package replication

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	_ "github.com/syncpipe/syncpipe/sinks/jsonl"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages"
)

// chainRecorder is a StageTracer recording the stages every batch passed,
// per run kind: "bucketstore snapshot", "jsonl stream", …
type chainRecorder struct {
	mu      sync.Mutex
	batches map[string][]string // run kind, pipeline, labels and seq → stages in the order they ended
	kinds   map[string]string   // the same key → run kind
	// flushSeqs are the seqs of the bucketstore stream's batches as its
	// flush stage started them, and flushWorkers the writers it used.
	flushSeqs    []uint64
	flushWorkers map[int]bool
	// streamed is closed once both streams committed a batch with rows.
	streamed  chan struct{}
	committed map[string]bool
}

func newChainRecorder() *chainRecorder {
	return &chainRecorder{batches: map[string][]string{}, kinds: map[string]string{}, flushWorkers: map[int]bool{},
		streamed: make(chan struct{}), committed: map[string]bool{}}
}

// kind names a run: its sink (a sink pipeline carries a pipeline label)
// and its path.
func (c *chainRecorder) kind(info pipeline.StageInfo) string {
	sink := "bucketstore"
	if slices.ContainsFunc(info.Labels, func(l pipeline.Label) bool { return l.Key == "pipeline" }) {
		sink = "jsonl"
	}
	path, _, _ := strings.Cut(info.Pipeline, " ")
	return sink + " " + path
}

func (c *chainRecorder) StageStart(ctx context.Context, info pipeline.StageInfo) context.Context {
	if c.kind(info) == "bucketstore stream" && info.Stage == sinks.StageFlush {
		c.mu.Lock()
		c.flushSeqs = append(c.flushSeqs, info.Seq)
		c.flushWorkers[info.Worker] = true
		c.mu.Unlock()
	}
	return ctx
}

func (c *chainRecorder) StageEnd(_ context.Context, info pipeline.StageEndInfo) {
	if info.Err != nil {
		return
	}
	kind := c.kind(info.StageInfo)
	key := fmt.Sprintf("%s|%s|%v|%d", kind, info.Pipeline, info.Labels, info.Seq)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches[key] = append(c.batches[key], info.Stage)
	c.kinds[key] = kind
	if info.Stage == sinks.StageCommit && info.Rows > 0 && strings.HasSuffix(kind, "stream") && !c.committed[kind] {
		c.committed[kind] = true
		if len(c.committed) == 2 {
			close(c.streamed)
		}
	}
}

// sequences returns, per run kind, the distinct stage sequences of the
// batches that were committed, and how many batches had each.
func (c *chainRecorder) sequences() map[string]map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[string]int{}
	for key, st := range c.batches {
		if st[len(st)-1] != sinks.StageCommit {
			continue // cut off by the end of the test
		}
		k := c.kinds[key]
		if out[k] == nil {
			out[k] = map[string]int{}
		}
		out[k][strings.Join(st, " → ")]++
	}
	return out
}

// The snapshot and the stream of a bucket storage pipeline and of a jsonl
// pipeline run the same exported stages — stages.Eval, stages.Build and
// the sink's flush and commit from stages.Chain — one span each per batch;
// bucket storage adds the probe of its Preparer and runs its stream
// through one writer, in batch order (sinks.OrderedStream).
func TestSharedChain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	e := newEnv(t, todos.Size{Lists: 5, Todos: 200, Seed: 3}, fmt.Sprintf(`
pipelines:
  - name: main
  - name: audit
    tables: [todos]
    stages: {flush_writers: 2}
    sink: {type: jsonl, settings: {dir: %q}}
`, dir))
	var audit config.Pipeline
	for _, pl := range e.cfg.EffectivePipelines() {
		if pl.Name == "audit" {
			audit = pl
		}
	}
	if audit.Name == "" {
		t.Fatal("no audit pipeline in the config")
	}
	log := slog.New(slog.DiscardHandler)
	CreatePublications(ctx, e.cfg, log)
	sink, err := OpenSink(ctx, e.cfg, audit, log)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())

	rec := newChainRecorder()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := New(Options{Config: e.cfg, Store: e.store, Tracer: rec}).Run(rctx); err != nil && rctx.Err() == nil {
			t.Errorf("replicator: %v", err)
		}
	})
	wg.Go(func() {
		r := NewSinkRunner(SinkOptions{Config: e.cfg, Pipeline: audit, Sink: sink, Store: e.store.Catalog(), Tracer: rec})
		if err := r.Run(rctx); err != nil && rctx.Err() == nil {
			t.Errorf("sink runner: %v", err)
		}
	})
	// Change rows until both streams committed a batch of changes: each
	// stream starts after its snapshot, whenever that is done.
	tick := time.NewTicker(200 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case <-rec.streamed:
			waiting = false
		case <-ctx.Done():
			t.Fatalf("the streams did not both commit a batch of changes: %v", rec.sequences())
		case <-tick.C:
			if _, err := e.src.Exec(ctx, `UPDATE todos SET description = description || '.' WHERE id IN (SELECT id FROM todos ORDER BY id LIMIT 5)`); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick.Stop()
	stop()
	wg.Wait()

	chain := []string{"read", stages.StageEval, stages.StageBuild, sinks.StageFlush, sinks.StageCommit}
	stream := []string{"read", postgres.StageDecode, stages.StageEval, stages.StageBuild}
	want := map[string]string{
		"bucketstore snapshot": strings.Join(chain, " → "),
		"jsonl snapshot":       strings.Join(chain, " → "),
		"bucketstore stream":   strings.Join(append(slices.Clone(stream), sinks.StagePrepare, sinks.StageFlush, sinks.StageCommit), " → "),
		"jsonl stream":         strings.Join(append(slices.Clone(stream), sinks.StageFlush, sinks.StageCommit), " → "),
	}
	got := rec.sequences()
	t.Logf("stage sequences (batches): %v", got)
	for kind, seq := range want {
		if len(got[kind]) != 1 || got[kind][seq] == 0 {
			t.Errorf("%s: batches passed %v, want every one to pass %s once each", kind, got[kind], seq)
		}
	}
	if len(got) != len(want) {
		t.Errorf("runs of kinds %v, want %v", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.flushWorkers) != 1 || !slices.IsSorted(rec.flushSeqs) {
		t.Errorf("the bucketstore stream's flush used writers %v in seq order %v, want one writer in order", rec.flushWorkers, rec.flushSeqs)
	}
}
