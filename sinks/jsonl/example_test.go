package jsonl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/jsonl"
)

// A Go program that builds its own pipeline opens the sink with New
// instead of YAML settings and ends the pipeline at it with
// sinks.FlushAndCommit. Here one transaction (LSN 42) with one upsert.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jsonl-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sink, err := jsonl.New(jsonl.Options{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	todos := &model.Table{Schema: "public", Name: "todos"}
	sent := false
	src := pipeline.SourceFunc[model.Change, sinks.Position](func(context.Context) (sinks.Batch, error) {
		if sent {
			return sinks.Batch{}, pipeline.ErrEndOfInput
		}
		sent = true
		put := model.Put{Bucket: "global[]", ObjectType: "todos", ObjectID: "t1", Checksum: 7, Data: []byte(`{"id":"t1"}`)}
		items := []model.Change{{Table: todos, Kind: model.Upsert, Puts: []model.Put{put}}}
		return sinks.Batch{Rows: 1, Items: items, Progress: sinks.Position{LSN: 42}}, nil
	})
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "todos"})
	if err := sinks.FlushAndCommit(ctx, pipeline.From(p, pipeline.StageConfig{Name: "read"}, src), sink, 1); err != nil {
		fmt.Println(err)
		return
	}
	if err := p.Run(ctx); err != nil {
		fmt.Println(err)
	}
	if pos, ok, err := sink.Resume(ctx, "", 0); err == nil && ok {
		fmt.Println("resume after LSN", pos.LSN)
	}
	if err := sink.Close(ctx); err != nil {
		fmt.Println(err)
	}
	lines, err := os.ReadFile(filepath.Join(dir, "public.todos.jsonl"))
	if err != nil {
		fmt.Println(err)
	}
	fmt.Print(string(lines))
	// Output:
	// resume after LSN 42
	// {"kind":"upsert","table":"public.todos","key":"00000000-0000-0000-0000-000000000000","puts":[{"bucket":"global[]","object_type":"todos","object_id":"t1","checksum":7,"data":{"id":"t1"}}],"lookups":[]}
}
