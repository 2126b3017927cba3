package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
)

// testDB returns a connection to a fresh database and its URI.
func testDB(t *testing.T) (*pgx.Conn, string) {
	t.Helper()
	uri := pgtest.NewDB(t)
	return pgtest.Connect(t, uri), uri
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustExec(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, q := range sqls {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func discoverOne(t *testing.T, conn *pgx.Conn, table string) TableInfo {
	t.Helper()
	infos, err := Discover(testCtx(t), conn, []string{table})
	if err != nil {
		t.Fatalf("Discover(%s): %v", table, err)
	}
	return infos[0]
}

// readAll drains a reader, checking the chunk invariants as it goes.
func readAll(t *testing.T, r *SnapshotReader, chunkRows int) (rows [][]model.Value, chunks []Chunk) {
	t.Helper()
	ctx := testCtx(t)
	for {
		ch, err := r.Next(ctx)
		if errors.Is(err, pipeline.ErrEndOfInput) {
			return rows, chunks
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(ch.Rows) == 0 || len(ch.Rows) > chunkRows {
			t.Fatalf("chunk of %d rows, ChunkRows %d", len(ch.Rows), chunkRows)
		}
		if ch.Final != (len(ch.Rows) < chunkRows) {
			t.Fatalf("chunk of %d rows has Final=%v", len(ch.Rows), ch.Final)
		}
		if len(chunks) > 0 && chunks[len(chunks)-1].Final {
			t.Fatal("chunk after a Final chunk")
		}
		chunks = append(chunks, ch)
		rows = append(rows, ch.Rows...)
	}
}

// textRows runs q and returns every value in text format (the output
// function's form, which is what pgoutput sends); NULL is nil.
func textRows(t *testing.T, conn *pgx.Conn, q string, ncols int) [][][]byte {
	t.Helper()
	formats := make(pgx.QueryResultFormats, ncols)
	rows, err := conn.Query(testCtx(t), q, formats)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out [][][]byte
	for rows.Next() {
		var row [][]byte
		for _, v := range rows.RawValues() {
			if v != nil {
				v = append([]byte{}, v...)
			}
			row = append(row, v)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func connectTo(t *testing.T, uri string) *pgx.Conn { return pgtest.Connect(t, uri) }

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}
