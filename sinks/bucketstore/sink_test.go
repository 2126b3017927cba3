package bucketstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
)

// listSource emits the given batches, then ends.
func listSource(batches []sinks.Batch) pipeline.Source[model.Change, sinks.Position] {
	i := 0
	return pipeline.SourceFunc[model.Change, sinks.Position](func(ctx context.Context) (sinks.Batch, error) {
		if i == len(batches) {
			return sinks.Batch{}, pipeline.ErrEndOfInput
		}
		i++
		return batches[i-1], nil
	})
}

// sinkPipeline wires src → flush (two writers) → commit to sink.
func sinkPipeline(ctx context.Context, name string, src pipeline.Source[model.Change, sinks.Position], sink sinks.Sink) (*pipeline.Pipeline[sinks.Position], error) {
	p := pipeline.New[sinks.Position](pipeline.Config{Name: name, Depth: 2})
	if err := sinks.FlushAndCommit(ctx, pipeline.From(p, pipeline.StageConfig{Name: "source"}, src), sink, 2); err != nil {
		return nil, err
	}
	return p, nil
}

func todoChanges(t *model.Table, lo, hi int, bucket string) []model.Change {
	var cs []model.Change
	for i := lo; i < hi; i++ {
		id := fmt.Sprint(i)
		cs = append(cs, model.Change{Table: t, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put(bucket, "todos", id, `{"id":"`+id+`"}`)}})
	}
	return cs
}

// TestSinkSnapshotThenStream runs the sink in two pipelines with two
// writers: a snapshot range whose progress must be resumable, then a
// stream whose commits publish checkpoints covering every written op.
func TestSinkSnapshotThenStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	sink := s.Writes().Sink(g.ID)

	var snap []sinks.Batch
	for c := range 5 {
		snap = append(snap, sinks.Batch{Items: todoChanges(todos, c*10, c*10+10, `1#global[]`),
			Progress: sinks.Position{Table: "public.todos", LastKey: []string{fmt.Sprint(c*10 + 9)}, RowsDone: int64(c*10 + 10), Done: c == 4}})
	}
	p, err := sinkPipeline(ctx, "snapshot", listSource(snap), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	pos, ok, err := sink.Resume(ctx, "public.todos", 0)
	if err != nil || !ok || pos.LastKey[0] != "49" || pos.RowsDone != 50 || !pos.Done {
		t.Fatalf("resume = %+v %v %v, want last key 49, 50 rows, done", pos, ok, err)
	}
	if _, ok, _ := sink.Resume(ctx, "public.todos", 1); ok {
		t.Fatal("range 1 was never committed but Resume found it")
	}

	if err := s.Catalog().MarkTableSnapshotDone(ctx, todos.ID, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.Catalog().MarkSnapshotDone(ctx, g.ID, 100); err != nil {
		t.Fatal(err)
	}
	var stream []sinks.Batch
	for c := range 6 {
		stream = append(stream, sinks.Batch{Items: todoChanges(todos, c*3, c*3+3, `1#by_list["x"]`),
			Progress: sinks.Position{LSN: uint64(200 + c*10)}})
	}
	p, err = sinkPipeline(ctx, "stream", listSource(stream), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Catalog().Group(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	all := ops(t, s, g.ID)
	// The checkpoint covers every id handed out: the last op's block.
	if last := all[len(all)-1].OpID; g2.LastCheckpoint < last || g2.LastCheckpoint >= last+opIDBlock ||
		uint64(g2.LastCheckpointLSN) != 250 || g2.State != StateActive {
		t.Fatalf("group after stream: checkpoint %d at %s (%s); want the block of op %d at 0/FA, ACTIVE",
			g2.LastCheckpoint, g2.LastCheckpointLSN, g2.State, all[len(all)-1].OpID)
	}
	pos, ok, err = sink.Resume(ctx, "", 0)
	if err != nil || !ok || pos.LSN != 250 {
		t.Fatalf("stream resume = %+v %v %v, want LSN 250", pos, ok, err)
	}
	// The runs' writers are gone; their grown encode buffers wait on the
	// store's shelf for the next run's.
	shelved := s.Writes().spare.Len()
	b, _ := s.Writes().spare.Get()
	grown := b != nil && cap(b.ops.buf) > 0
	if shelved == 0 || shelved > 2 || !grown {
		t.Fatalf("after two runs of 2 writers: %d buffer sets shelved (grown: %v), want 1 or 2, grown", shelved, grown)
	}
}

// TestSinkFromRegistry opens bucket storage by name, as a program that
// opens sinks from the registry does: the sink writes to the newest
// group, and its Close closes the storage the factory opened, while a
// sink handed out by a Store's write role leaves that Store open.
func TestSinkFromRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	env := sinks.Env{Pipeline: "registry", Storage: sinks.StorageConn{URI: uri}}
	s, err := Open(ctx, Config{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := sinks.Open(ctx, sinks.Config{Type: TypeName}, env); err == nil {
		t.Fatal("opened a bucketstore sink on storage without a group")
	}
	var newest Group
	for range 2 {
		if newest, err = s.Catalog().CreateGroup(ctx, "bucket_definitions: {}", "syncpipe_"); err != nil {
			t.Fatal(err)
		}
	}

	opened, err := sinks.Open(ctx, sinks.Config{Type: TypeName}, env)
	if err != nil {
		t.Fatal(err)
	}
	k := opened.(*Sink)
	if k.group != newest.ID {
		t.Errorf("the sink writes to group %d, want the newest, %d", k.group, newest.ID)
	}
	if err := k.writes.pool.Ping(ctx); err != nil {
		t.Fatalf("the sink's storage before Close: %v", err)
	}
	if err := k.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.writes.pool.Ping(ctx); err == nil {
		t.Error("the storage the registry factory opened is still open after the sink's Close")
	}

	if err := s.Writes().Sink(newest.ID).Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().Ping(ctx); err != nil {
		t.Errorf("closing a sink of the write role closed its Store: %v", err)
	}
}
