package postgres

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/pipeline"
)

// todosColumns is the SPEC §9 todos table.
var todosColumns = []Column{
	{Name: "id", TypeOID: oidUUID, TypeName: "uuid"},
	{Name: "list_id", TypeOID: oidUUID, TypeName: "uuid"},
	{Name: "description", TypeOID: 25, TypeName: "text"},
	{Name: "completed", TypeOID: oidBool, TypeName: "boolean"},
	{Name: "created_at", TypeOID: oidTimestamptz, TypeName: "timestamp with time zone"},
}

func todosRawBinary() [][]byte {
	ts := make([]byte, 8)
	binary.BigEndian.PutUint64(ts, uint64(837772800123456)) // 2026-07-20 …
	return [][]byte{
		[]byte("\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11"),
		[]byte("\x3f\x2e\x1d\x0c\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x22"),
		[]byte("Buy oat milk, bread and a birthday card for Sam on the way"),
		{1},
		ts,
	}
}

// BenchmarkDecodeTodosBinary measures the snapshot decode path: one op is
// one todos row in binary/text wire format turned into rule values, in
// chunks of 10 000 rows (the chunk's finish is included).
func BenchmarkDecodeTodosBinary(b *testing.B) {
	const chunk = 10000
	raw := todosRawBinary()
	cb := newChunkBuilder(todosColumns, []int{0})
	cb.start(chunk)
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		if i%chunk == 0 {
			_ = cb.finish()
			cb.start(chunk)
		}
		if err := cb.add(raw); err != nil {
			b.Fatal(err)
		}
	}
	_ = cb.finish()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

// BenchmarkDecodeTodosText measures the stream decode path (DecodeText per
// column) on the same row in text format, for comparison.
func BenchmarkDecodeTodosText(b *testing.B) {
	raw := [][]byte{
		[]byte("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
		[]byte("3f2e1d0c-9c0b-4ef8-bb6d-6bb9bd380a22"),
		[]byte("Buy oat milk, bread and a birthday card for Sam on the way"),
		[]byte("t"),
		[]byte("2026-07-20 00:00:00.123456+00"),
	}
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		for i, c := range todosColumns {
			if _, err := DecodeText(c, raw[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

// BenchmarkSnapshotTodos reads a 100k-row todos table end to end (query,
// wire, decode) with the snapshot reader; one op is one 10 000-row chunk.
func BenchmarkSnapshotTodos(b *testing.B) {
	uri := pgtest.NewDB(b)
	conn := pgtest.Connect(b, uri)
	ctx := b.Context()
	if _, err := conn.Exec(ctx, `
CREATE TABLE todos (id uuid PRIMARY KEY, list_id uuid, description text, completed bool, created_at timestamptz);
INSERT INTO todos SELECT gen_random_uuid(), md5((g % 1000)::text)::uuid, repeat(md5(g::text), 2),
  g % 3 = 0, now() - g * interval '1 minute' FROM generate_series(1, 100000) g;
ANALYZE todos;`); err != nil {
		b.Fatal(err)
	}
	infos, err := Discover(ctx, conn, []string{"todos"})
	if err != nil {
		b.Fatal(err)
	}
	r := NewSnapshotReader(conn, infos[0], KeyRange{}, SnapshotOptions{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	rows := 0
	for b.Loop() {
		ch, err := r.Next(ctx)
		if errors.Is(err, pipeline.ErrEndOfInput) {
			r = NewSnapshotReader(conn, infos[0], KeyRange{}, SnapshotOptions{})
			ch, err = r.Next(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		rows += len(ch.Rows)
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(rows), "allocs/row")
}
