package jsonl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/jsonl"
)

// payload is the data of a test put: it says who wrote it, and its padding
// makes batches large enough that a torn or unguarded write would show.
type payload struct {
	Writer, Batch, Row int
	Pad                string
}

func makeBatch(writer, batch, rows int, tables ...*model.Table) sinks.Batch {
	items := make([]model.Change, rows)
	for r := range items {
		data, _ := json.Marshal(payload{writer, batch, r, strings.Repeat("x", 500+(writer*977+r*131)%3000)})
		items[r] = model.Change{Table: tables[r%len(tables)], Kind: model.Upsert,
			Puts: []model.Put{{Bucket: "b", ObjectType: "t", ObjectID: fmt.Sprint(r), Data: data}}}
	}
	return sinks.Batch{Seq: uint64(batch), Rows: rows, Items: items}
}

// Several writers and runs committing to the same files at once: every
// line must stay whole, and the lines of one batch for one file together.
func TestConcurrentWritersNeverInterleave(t *testing.T) {
	const writers, batches, rows = 4, 30, 40
	dir := t.TempDir()
	s := open(t, map[string]any{"dir": dir, "fsync": false})
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		w := writer(t, s, i)
		wg.Go(func() {
			for b := range batches {
				batch := makeBatch(i, b, rows, todos, lists)
				batch.Progress = sinks.Position{Table: "public.todos", Range: i, RowsDone: int64(b)}
				if err := w.Write(context.Background(), batch); err != nil {
					errs[i] = err
					return
				}
				if err := s.Commit(context.Background(), batch); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	for _, tbl := range []*model.Table{todos, lists} {
		seen := map[[3]int]bool{}
		closed := map[[2]int]bool{} // (writer, batch) runs that already ended
		var prev [2]int
		for n, l := range readLines(t, filepath.Join(dir, jsonl.FileName(tbl.Schema, tbl.Name))) {
			var p payload
			if err := json.Unmarshal(l.Puts[0].Data, &p); err != nil {
				t.Fatalf("%s line %d: data: %v", tbl, n+1, err)
			}
			run := [2]int{p.Writer, p.Batch}
			if n > 0 && run != prev {
				closed[prev] = true
			}
			if closed[run] {
				t.Fatalf("%s line %d: lines of writer %d batch %d are split", tbl, n+1, p.Writer, p.Batch)
			}
			prev = run
			row := [3]int{p.Writer, p.Batch, p.Row}
			if seen[row] {
				t.Fatalf("%s line %d: duplicate %v", tbl, n+1, row)
			}
			seen[row] = true
		}
		if len(seen) != writers*batches*rows/2 {
			t.Errorf("%s: %d lines; want %d", tbl, len(seen), writers*batches*rows/2)
		}
	}
}

// The sink in a real pipeline: two flush writers, ordered commit, and the
// committed stream position available to Resume afterwards.
func TestPipelineEndToEnd(t *testing.T) {
	dir := t.TempDir()
	p := config.Pipeline{Name: "e2e", Stages: config.Stages{FlushWriters: 2}, Sink: config.Sink{Type: "jsonl", Settings: map[string]any{"dir": dir}}}
	s, err := sinks.Open(context.Background(), p, sinks.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	next := 0
	src := pipeline.SourceFunc[model.Change, sinks.Position](func(context.Context) (sinks.Batch, error) {
		if next == 10 {
			return sinks.Batch{}, pipeline.ErrEndOfInput
		}
		b := makeBatch(0, next, 5, todos, lists, todos)
		next++
		b.Progress = sinks.Position{LSN: uint64(next) * 16}
		return b, nil
	})
	run, err := sinks.NewPipeline(context.Background(), p.Name, src, s, p.Stages)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(readLines(t, filepath.Join(dir, "public.todos.jsonl"))); n != 30 {
		t.Errorf("%d todos lines; want 30", n)
	}
	if n := len(readLines(t, filepath.Join(dir, "public.lists.jsonl"))); n != 20 {
		t.Errorf("%d lists lines; want 20", n)
	}
	if pos, ok, err := s.Resume(context.Background(), "", 0); err != nil || !ok || pos.LSN != 160 {
		t.Errorf("Resume = %+v, %v, %v; want LSN 160", pos, ok, err)
	}
}

// Building lines must not allocate per row or per batch once the staged
// buffers have grown and are recycled: the sink's cost is what it writes.
func TestWriteDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	s, err := jsonl.New(jsonl.Options{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	w := writer(t, s, 0)
	b := makeBatch(1, 1, 100, todos, lists)
	b.Items[0].Lookups = []model.Lookup{{Key: []byte("[\"k\xff\",\"é\"]"), Params: []byte(`[]`)}}
	b.Items[1].Puts[0].ObjectID = "ü\n\"x\""
	if err := w.Write(context.Background(), b); err != nil { // grow the buffers
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := w.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Write; want 0", allocs)
	}
}

func BenchmarkWrite(b *testing.B) {
	s, err := jsonl.New(jsonl.Options{Dir: b.TempDir(), NoFsync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	w, _ := s.Writer(context.Background(), 0)
	batch := makeBatch(0, 0, 1000, todos, lists)
	var bytes int64
	for _, c := range batch.Items {
		bytes += int64(len(c.Puts[0].Data)) + 100
	}
	b.SetBytes(bytes)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}
