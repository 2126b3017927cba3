package sinks_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/syncpipe/syncpipe/config"
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

// A Go program registers its own sink type, names it in a YAML pipeline
// with settings, opens it and runs the pipeline.
func ExampleRegister() {
	yaml := `
source:     {uri: "postgres://app@127.0.0.1:5432/app"}
storage:    {uri: "postgres://app@127.0.0.1:5432/syncpipe"}
sync_rules: {content: "bucket_definitions: {}"}
pipelines:
  - name: audit
    stages: {flush_writers: 2}
    sink: {type: counting, settings: {label: audit}}
`
	cfg, err := config.LoadBytes("syncpipe.yaml", []byte(yaml))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := cfg.CheckSinks(sinks.Names()); err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, p := range cfg.EffectivePipelines() {
		sink, err := sinks.Open(ctx, p, sinks.Env{})
		if err != nil {
			fmt.Println(err)
			return
		}
		run, err := sinks.NewPipeline(ctx, p.Name, changes(), sink, p.Stages)
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := run.Run(ctx); err != nil {
			fmt.Println(err)
		}
		if pos, ok, err := sink.Resume(ctx, "", 0); err == nil && ok {
			fmt.Printf("%s: resume after LSN %d\n", p.Name, pos.LSN)
		}
		if err := sink.Close(ctx); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// audit: committed up to LSN 1000
	// audit: committed up to LSN 2000
	// audit: committed up to LSN 3000
	// audit: resume after LSN 3000
	// audit: 3 upserts, 2 deletes
}
