package stages

import (
	"testing"

	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

func todoSpecs(t testing.TB) (lists, todoSpec *TableSpec) {
	t.Helper()
	rules, err := syncrules.Parse([]byte(todos.Rules), syncrules.Options{GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	lists, err = NewTableSpec(&model.Table{ID: "tl", Schema: "public", Name: "lists"}, rules,
		[]string{"id", "name", "owner_id"}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	todoSpec, err = NewTableSpec(&model.Table{ID: "tt", Schema: "public", Name: "todos"}, rules,
		[]string{"id", "list_id", "description", "completed", "created_at"}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	return lists, todoSpec
}

func TestBuilderTodoRow(t *testing.T) {
	_, spec := todoSpecs(t)
	b := NewBuilder(spec)
	row := []model.Value{model.Text("t1"), model.Text("l1"), model.Text("milk"),
		model.Bool(true), model.Text("2026-01-01 09:00:00Z")}
	cs, err := b.Upsert(row, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || len(cs[0].Puts) != 1 || cs[0].TracksLookups {
		t.Fatalf("changes = %+v", cs)
	}
	p := cs[0].Puts[0]
	wantData := `{"id":"t1","list_id":"l1","description":"milk","completed":1,"created_at":"2026-01-01 09:00:00Z"}`
	if p.Bucket != `1#by_list["l1"]` || p.ObjectType != "todos" || p.ObjectID != "t1" || string(p.Data) != wantData {
		t.Fatalf("put = %s %s %s %s", p.Bucket, p.ObjectType, p.ObjectID, p.Data)
	}
	if p.Checksum != checksum.PutString("todos", "t1", wantData) {
		t.Fatalf("checksum %d does not match the data", p.Checksum)
	}
	// Replica id: UUIDv5 of the BSON {id: "t1"} (PowerSync's encoding).
	var rk checksum.ReplicaKey
	rk.String("id", "t1")
	if uuid.UUID(cs[0].Key) != rk.UUID() {
		t.Fatalf("key %s, want %s", uuid.UUID(cs[0].Key), rk.UUID())
	}
}

func TestBuilderParameterTable(t *testing.T) {
	spec, _ := todoSpecs(t)
	b := NewBuilder(spec)
	cs, err := b.Upsert([]model.Value{model.Text("l1"), model.Text("Groceries"), model.Text("u1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	if len(c.Puts) != 1 || c.Puts[0].Bucket != "1#global[]" || c.Puts[0].ObjectType != "lists" {
		t.Fatalf("puts = %+v", c.Puts)
	}
	if !c.TracksLookups || len(c.Lookups) != 1 || string(c.Lookups[0].Key) != `["by_list","1"]` ||
		string(c.Lookups[0].Params) != `[{"list_id":"l1"}]` {
		t.Fatalf("lookups = %q", c.Lookups)
	}
	cs = b.Delete([]model.Value{model.Text("l1"), model.Null(), model.Null()}, cs)
	if cs[1].Kind != model.Delete || cs[1].Key != c.Key || !cs[1].TracksLookups || len(cs[1].Puts) != 0 {
		t.Fatalf("delete change = %+v (upsert key %x)", cs[1], c.Key)
	}
}

func TestBatchesDoNotShareMemory(t *testing.T) {
	_, spec := todoSpecs(t)
	b := NewBuilder(spec)
	row := func(id string) []model.Value {
		return []model.Value{model.Text(id), model.Text("l1"), model.Text("x"),
			model.Bool(false), model.Text("2026-01-01 09:00:00Z")}
	}
	first, _ := b.Upsert(row("a"), nil)
	before := string(first[0].Puts[0].Data)
	if _, err := b.Upsert(row("b"), nil); err != nil {
		t.Fatal(err)
	}
	if string(first[0].Puts[0].Data) != before {
		t.Fatalf("building the next batch changed the previous one: %s -> %s", before, first[0].Puts[0].Data)
	}
}

func TestMissingIdentityColumn(t *testing.T) {
	rules, err := syncrules.Parse([]byte(todos.Rules), syncrules.Options{GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewTableSpec(&model.Table{Schema: "public", Name: "lists"}, rules, []string{"id"}, []string{"uuid"}); err == nil {
		t.Fatal("unknown identity column accepted")
	}
	if _, err := NewTableSpec(&model.Table{Schema: "public", Name: "lists"}, rules, []string{"id"}, nil); err == nil {
		t.Fatal("table without identity accepted")
	}
}

// BenchmarkBuildTodoRow measures bucket eval + op build (JSON, checksum,
// replica id) per todos row under the SPEC §9 rules, the way the Eval and
// Build stages run it: batches of 1000 rows.
func BenchmarkBuildTodoRow(b *testing.B) {
	_, spec := todoSpecs(b)
	row := []model.Value{model.Text("0d5c1d0e-7d1b-4c9f-9e43-1d2b3c4d5e6f"),
		model.Text("8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d"),
		model.Text("buy milk tomorrow morning (#12345)..........................."),
		model.Bool(false), model.Text("2026-01-01 09:00:00.123456Z")}
	const batch = 1000
	rows := make([][]model.Value, batch)
	for i := range rows {
		rows[i] = row
	}
	in := Upserts(spec, rows)
	w := &evalWorker{evs: map[*TableSpec]*syncrules.Evaluator{}}
	var rk checksum.ReplicaKey
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if out := build(&rk, w.eval(in, batch*120), batch*120); len(out) != batch {
			b.Fatal(len(out))
		}
		n += batch
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(n), "ns/row")
}
