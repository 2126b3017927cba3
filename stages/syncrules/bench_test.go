package syncrules

import (
	"testing"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// todoRow is a SPEC §9 todos row as the decode stage delivers it.
var todoRow = []model.Value{
	model.Text("0b7ad3a6-5f7e-4c1b-9d0a-1f2e3d4c5b6a"),
	model.Text("9c8b7a6f-5e4d-4c3b-2a19-0f8e7d6c5b4a"),
	model.Text("Buy milk, eggs, bread and butter before the shop closes at 8"),
	model.Int(1),
	model.Text("2024-05-01 10:00:00.123456Z"),
}

func benchTodos(b *testing.B, withChecksum bool) {
	r := mustParse(b, todosRules)
	bt, err := r.Bind("todos", todoCols)
	if err != nil {
		b.Fatal(err)
	}
	ev := bt.NewEvaluator()
	out := make([]Output, 0, 16)
	buf := make([]byte, 0, 1<<12)
	var sum uint32
	b.ReportAllocs()
	ops := 0
	for b.Loop() {
		out, buf, _ = ev.EvaluateRow(todoRow, out[:0], buf[:0])
		ops += len(out)
		if withChecksum {
			for i := range out {
				sum += checksum.Put(out[i].ObjectType, out[i].ObjectID, out[i].Data)
			}
		}
	}
	_ = sum
	if ops != b.N {
		b.Fatalf("%d ops for %d rows", ops, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkEvaluateTodos: SPEC §9 by_list + global rules on a todos row
// (one output op per row).
func BenchmarkEvaluateTodos(b *testing.B) { benchTodos(b, false) }

// BenchmarkEvaluateTodosWithChecksum adds the op checksum (bucket eval +
// op build).
func BenchmarkEvaluateTodosWithChecksum(b *testing.B) { benchTodos(b, true) }

// BenchmarkEvaluateLists: a lists row goes to the global bucket and yields
// a parameter lookup entry.
func BenchmarkEvaluateLists(b *testing.B) {
	r := mustParse(b, todosRules)
	bt, _ := r.Bind("lists", []string{"id", "name", "owner_id"})
	ev := bt.NewEvaluator()
	row := []model.Value{model.Text("9c8b7a6f-5e4d-4c3b-2a19-0f8e7d6c5b4a"), model.Text("Groceries"), model.Text("user-1")}
	out := make([]Output, 0, 4)
	le := make([]LookupEntry, 0, 4)
	buf := make([]byte, 0, 1<<12)
	b.ReportAllocs()
	for b.Loop() {
		out, buf, _ = ev.EvaluateRow(row, out[:0], buf[:0])
		le, buf, _ = ev.EvaluateParameterRow(row, le[:0], buf)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkRequest: evaluate the rules for a sync request.
func BenchmarkRequest(b *testing.B) {
	r := mustParse(b, todosRules)
	req := Request{UserID: "u1", Claims: []byte(`{"sub":"u1","iat":1700000000,"exp":1700003600,"aud":"syncpipe"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Request(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse: load and compile the rules.
func BenchmarkParse(b *testing.B) {
	src := []byte(todosRules)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(src, Options{GroupID: "1"}); err != nil {
			b.Fatal(err)
		}
	}
}
