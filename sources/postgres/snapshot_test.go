package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
)

// expectKeys decodes the table's keys, in key order, independently of the
// reader: SELECT k … ORDER BY k in text format, then DecodeText.
func expectKeys(t *testing.T, conn *pgx.Conn, ti TableInfo) [][]model.Value {
	t.Helper()
	q := "SELECT " + keyList(ti) + " FROM " + pgx.Identifier{ti.Schema, ti.Name}.Sanitize() + " ORDER BY " + keyList(ti)
	var out [][]model.Value
	for _, k := range textRows(t, conn, q, len(ti.KeyColumns)) {
		row := make([]model.Value, len(k))
		for i, s := range k {
			v, err := DecodeText(ti.Columns[ti.KeyColumns[i]], s)
			if err != nil {
				t.Fatal(err)
			}
			row[i] = v
		}
		out = append(out, row)
	}
	return out
}

func rowKeys(ti TableInfo, rows [][]model.Value) [][]model.Value {
	out := make([][]model.Value, len(rows))
	for i, r := range rows {
		for _, ci := range ti.KeyColumns {
			out[i] = append(out[i], r[ci])
		}
	}
	return out
}

func sameKeys(t *testing.T, what string, got, want [][]model.Value) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !slices.EqualFunc(got[i], want[i], model.Value.Equal) {
			t.Fatalf("%s: row %d has key %v, want %v", what, i, got[i], want[i])
		}
	}
}

// keyTables creates one table per key shape, each with awkward key values.
var keyTables = map[string][]string{
	"int": {`CREATE TABLE t (id int8 PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT g, 'v' || g FROM generate_series(-30, 30) g`,
		`INSERT INTO t VALUES (-9223372036854775808, 'min'), (9223372036854775807, 'max')`},
	"uuid": {`CREATE TABLE t (id uuid PRIMARY KEY, v int)`,
		`INSERT INTO t SELECT md5(g::text)::uuid, g FROM generate_series(1, 60) g`,
		`INSERT INTO t VALUES ('00000000-0000-0000-0000-000000000000', 0), ('ffffffff-ffff-ffff-ffff-ffffffffffff', -1)`},
	// ICU collation orders 'a' < 'B' (C would order 'B' < 'a'): keyset must
	// follow the column's collation.
	"text": {`CREATE TABLE t (id text COLLATE "und-x-icu" PRIMARY KEY, n int)`,
		`INSERT INTO t SELECT chr(65 + g % 26) || g, g FROM generate_series(1, 40) g`,
		`INSERT INTO t SELECT lower(chr(65 + g % 26)) || g, g FROM generate_series(1, 20) g`,
		`INSERT INTO t VALUES (''), (' '), ('a b'), ('a,b'), ('"q"'), ('\'), ('é'), ('NULL'), ('{x}')`},
	"composite": {`CREATE TABLE t (a text, b int, c varchar(5), v text, PRIMARY KEY (a, b, c))`,
		`INSERT INTO t SELECT 'k' || (g % 4), g % 7, chr(97 + g % 3), 'row' || g FROM generate_series(1, 84) g`},
	"types": {`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE TABLE t (ts timestamptz, m mood, f float8, b bytea, c char(3), d date, PRIMARY KEY (ts, m, f, b, c, d))`,
		`INSERT INTO t SELECT ts, m, f, b, c, d FROM
		   unnest(ARRAY['-infinity', '0044-03-15 10:00:00 BC', '2026-01-01 09:00:00.5', 'infinity']::timestamptz[]) ts,
		   unnest(ARRAY['ok', 'sad']::mood[]) m,
		   unnest(ARRAY['NaN', '-Infinity', '1.1', '-0', '1e-300']::float8[]) f,
		   unnest(ARRAY['\x', '\x00ff']::bytea[]) b,
		   unnest(ARRAY['a', 'ab ']::char(3)[]) c,
		   unnest(ARRAY['2026-01-02', 'infinity']::date[]) d`},
}

func TestSnapshotKeysetAllKeyShapes(t *testing.T) {
	t.Parallel()
	for name, setup := range keyTables {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn, _ := testDB(t)
			mustExec(t, conn, setup...)
			ti := discoverOne(t, conn, "t")
			want := expectKeys(t, conn, ti)
			for _, chunkRows := range []int{1, 7, 1000} {
				r := NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{ChunkRows: chunkRows})
				rows, chunks := readAll(t, r, chunkRows)
				sameKeys(t, fmt.Sprintf("chunk %d", chunkRows), rowKeys(ti, rows), want)
				if wantChunks := (len(want) + chunkRows - 1) / chunkRows; len(chunks) != wantChunks {
					t.Errorf("chunk %d: %d chunks for %d rows", chunkRows, len(chunks), len(want))
				}
				// Every chunk's LastKey resumes exactly after that chunk.
				if chunkRows == 7 {
					for i, ch := range chunks[:len(chunks)-1] {
						rr := NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{ChunkRows: 1000, After: ch.LastKey})
						rest, _ := readAll(t, rr, 1000)
						sameKeys(t, fmt.Sprintf("resume after chunk %d", i), rowKeys(ti, rest), want[(i+1)*7:])
					}
				}
			}
		})
	}
}

func TestSnapshotChunkBoundaries(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	mustExec(t, conn, `CREATE TABLE t (id int PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g`)
	ti := discoverOne(t, conn, "t")
	ctx := testCtx(t)

	// 2000 rows in chunks of 1000: two full chunks, neither Final, then end.
	r := NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{ChunkRows: 1000})
	_, chunks := readAll(t, r, 1000)
	if len(chunks) != 2 || chunks[1].Final || !slices.Equal(chunks[1].LastKey, []string{"2000"}) {
		t.Fatalf("chunks: %d, final %v, last %v", len(chunks), chunks[1].Final, chunks[1].LastKey)
	}
	if _, err := r.Next(ctx); !errors.Is(err, pipeline.ErrEndOfInput) {
		t.Fatalf("Next after end = %v", err)
	}
	if chunks[0].Bytes <= 0 || chunks[0].Rows[999][1].Str() != "v1000" {
		t.Errorf("chunk 0: %d bytes, last row %v", chunks[0].Bytes, chunks[0].Rows[999])
	}

	// Bounded range (500, 1700], resumed after 1234: reads 1235..1700 only.
	r = NewSnapshotReader(conn, ti, KeyRange{Lower: []string{"500"}, Upper: []string{"1700"}},
		SnapshotOptions{ChunkRows: 100, After: []string{"1234"}})
	rows, chunks := readAll(t, r, 100)
	if len(rows) != 466 || rows[0][0].Int64() != 1235 || rows[465][0].Int64() != 1700 || !chunks[len(chunks)-1].Final {
		t.Fatalf("resumed range: %d rows, first %v, last %v", len(rows), rows[0][0], rows[len(rows)-1][0])
	}
	if got := r.Position(); !slices.Equal(got, []string{"1700"}) {
		t.Errorf("Position = %v", got)
	}

	// Argument errors surface on the first Next.
	bad := NewSnapshotReader(conn, ti, KeyRange{Lower: []string{"1", "2"}}, SnapshotOptions{})
	if _, err := bad.Next(ctx); err == nil || !strings.Contains(err.Error(), "must have 1 values") {
		t.Errorf("bad range error = %v", err)
	}
	bad = NewSnapshotReader(conn, TableInfo{Schema: "public", Name: "x"}, KeyRange{}, SnapshotOptions{})
	if _, err := bad.Next(ctx); !errors.Is(err, ErrNoKey) {
		t.Errorf("keyless table error = %v", err)
	}
}

func TestSnapshotSchemaChange(t *testing.T) {
	t.Parallel()
	conn, uri := testDB(t)
	mustExec(t, conn, `CREATE TABLE t (id int PRIMARY KEY, v int)`,
		`INSERT INTO t SELECT g, g FROM generate_series(1, 30) g`)
	ti := discoverOne(t, conn, "t")
	r := NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{ChunkRows: 10})
	if _, err := r.Next(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	other := connectTo(t, uri)
	mustExec(t, other, `ALTER TABLE t ALTER COLUMN v TYPE text`)
	_, err := r.Next(testCtx(t))
	if !errors.Is(err, ErrSchemaChanged) || !strings.Contains(err.Error(), "discover and snapshot it again") {
		t.Fatalf("after ALTER TABLE: %v", err)
	}
}

func TestSnapshotCancelled(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	mustExec(t, conn, `CREATE TABLE t (id int PRIMARY KEY)`, `INSERT INTO t VALUES (1)`)
	ti := discoverOne(t, conn, "t")
	ctx, cancel := contextWithCancel(t)
	cancel()
	r := NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{})
	if _, err := r.Next(ctx); err == nil || errors.Is(err, pipeline.ErrEndOfInput) {
		t.Fatalf("Next with cancelled context = %v", err)
	}
}

func TestConnConfig(t *testing.T) {
	t.Parallel()
	_, uri := testDB(t)
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	cfg, err := ConnConfig(uri+sep+"application_name=mine&TimeZone=Europe/Paris", KeepAlive{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.ConnectConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(testCtx(t))
	var app, tz, ds, efd string
	if err := c.QueryRow(testCtx(t), `SELECT current_setting('application_name'), current_setting('TimeZone'),
		current_setting('DateStyle'), current_setting('extra_float_digits')`).Scan(&app, &tz, &ds, &efd); err != nil {
		t.Fatal(err)
	}
	// Settings in the URI win; the rest come from SessionParams.
	if app != "mine" || tz != "Europe/Paris" || ds != "ISO, MDY" || efd != "1" {
		t.Errorf("session: application_name=%s TimeZone=%s DateStyle=%s extra_float_digits=%s", app, tz, ds, efd)
	}
	if _, err := ConnConfig("postgres://[bad", KeepAlive{}); err == nil {
		t.Error("bad URI accepted")
	}
}
