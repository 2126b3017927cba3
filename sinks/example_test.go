package sinks_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
)

// countSink is a custom sink that only counts what it receives. A real sink
// would make each batch durable before Write returns and store the position
// durably in Commit, so that Resume still knows it after a restart.
type countSink struct {
	label   string
	upserts atomic.Int64 // writers run concurrently
	deletes atomic.Int64
	last    atomic.Pointer[sinks.Position]
}

// countSpec declares the sink's settings: validate checks them offline
// with their file positions, Open hands the factory checked values.
var countSpec = sinks.Spec{
	Summary: "counts the changes it receives",
	Fields:  []sinks.Field{{Name: "label", Type: sinks.FieldString, Default: "changes", Doc: "Prefix of the lines it prints."}},
}

// newCountSink is the sink's Factory.
func newCountSink(_ context.Context, settings *sinks.Settings, _ sinks.Env) (sinks.Sink, error) {
	return &countSink{label: settings.String("label")}, nil
}

func (s *countSink) Writer(context.Context, int) (sinks.Writer, error) {
	return pipeline.WriterFunc[model.Change, sinks.Position](func(_ context.Context, b sinks.Batch) error {
		for _, c := range b.Items {
			if c.Kind == model.Delete {
				s.deletes.Add(1)
			} else {
				s.upserts.Add(1)
			}
		}
		return nil
	}), nil
}

func (s *countSink) Commit(_ context.Context, b sinks.Batch) error {
	fmt.Printf("%s: committed up to LSN %d\n", s.label, b.Progress.LSN)
	s.last.Store(&b.Progress)
	return nil
}

func (s *countSink) Resume(_ context.Context, table string, _ int) (sinks.Position, bool, error) {
	if p := s.last.Load(); p != nil && table == "" {
		return *p, true, nil
	}
	return sinks.Position{}, false, nil
}

func (s *countSink) Close(context.Context) error {
	fmt.Printf("%s: %d upserts, %d deletes\n", s.label, s.upserts.Load(), s.deletes.Load())
	return nil
}

// Register the sink type before the config is checked and opened; a
// library sink does this in its own init, so a blank import enables it.
func init() {
	if err := sinks.Register("counting", countSpec, newCountSink); err != nil {
		panic(err)
	}
}

// changes is a tiny in-memory source: three stream batches, each ending at
// a transaction's LSN. A real source reads Postgres.
func changes() pipeline.Source[model.Change, sinks.Position] {
	todos := &model.Table{Schema: "public", Name: "todos"}
	batches := [][]model.ChangeKind{{model.Upsert, model.Upsert}, {model.Delete}, {model.Upsert, model.Delete}}
	next := 0
	return pipeline.SourceFunc[model.Change, sinks.Position](func(context.Context) (sinks.Batch, error) {
		if next == len(batches) {
			return sinks.Batch{}, pipeline.ErrEndOfInput
		}
		var items []model.Change
		for _, k := range batches[next] {
			items = append(items, model.Change{Table: todos, Kind: k})
		}
		next++
		return sinks.Batch{Rows: len(items), Items: items, Progress: sinks.Position{LSN: uint64(1000 * next)}}, nil
	})
}

// A Go program registers its own sink type, opens it by type name with
// settings (as a YAML pipeline's sink: {type: counting, settings: {label:
// audit}} does) and runs a pipeline into it.
func ExampleRegister() {
	ctx := context.Background()
	sink, err := sinks.Open(ctx, sinks.Config{Type: "counting", Settings: map[string]any{"label": "audit"}}, sinks.Env{Pipeline: "audit"})
	if err != nil {
		fmt.Println(err)
		return
	}
	run := pipeline.New[sinks.Position](pipeline.Config{Name: "audit"})
	in := pipeline.From(run, pipeline.StageConfig{Name: "source"}, changes())
	if err := sinks.FlushAndCommit(ctx, in, sink, 2); err != nil {
		fmt.Println(err)
		return
	}
	if err := run.Run(ctx); err != nil {
		fmt.Println(err)
	}
	if pos, ok, err := sink.Resume(ctx, "", 0); err == nil && ok {
		fmt.Printf("audit: resume after LSN %d\n", pos.LSN)
	}
	if err := sink.Close(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// audit: committed up to LSN 1000
	// audit: committed up to LSN 2000
	// audit: committed up to LSN 3000
	// audit: resume after LSN 3000
	// audit: 3 upserts, 2 deletes
}

// A factory reads its settings typed, as its Spec declares them: a
// declared default fills a setting the config leaves out, and Has tells a
// setting that has a value (given or defaulted) from one that has none.
func ExampleSettings() {
	spec := sinks.Spec{Summary: "keeps every n-th change", Fields: []sinks.Field{
		{Name: "every", Type: sinks.FieldInt, Default: 10, Doc: "Keep one change in this many."},
		{Name: "tag", Type: sinks.FieldString, Doc: "Label of the kept changes; none when absent."},
	}}
	factory := func(_ context.Context, set *sinks.Settings, _ sinks.Env) (sinks.Sink, error) {
		fmt.Printf("every %d, tag set: %v\n", set.Int("every"), set.Has("tag"))
		return &countSink{label: "sampled"}, nil
	}
	if err := sinks.Register("sampling", spec, factory); err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, settings := range []map[string]any{{"every": 3}, {"tag": "audit"}} {
		sink, err := sinks.Open(ctx, sinks.Config{Type: "sampling", Settings: settings}, sinks.Env{Pipeline: "sampled"})
		if err != nil {
			fmt.Println(err)
			return
		}
		_ = sink.Close(ctx)
	}
	// Output:
	// every 3, tag set: false
	// sampled: 0 upserts, 0 deletes
	// every 10, tag set: true
	// sampled: 0 upserts, 0 deletes
}
