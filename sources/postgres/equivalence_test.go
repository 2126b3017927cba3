package postgres

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
)

const everyTypeSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
CREATE TABLE every (
  id int PRIMARY KEY,
  i2 int2, i4 int4, i8 int8, o oid, b bool, f4 float4, f8 float8, n numeric, t text,
  vc varchar(10), c char(5), u uuid, d date, ts timestamp, tstz timestamptz, tm time,
  tmtz timetz, iv interval, j json, jb jsonb, by bytea, m mood, dom posint, ip inet,
  rng tstzrange, pt point, money money, bits bit(3), vb varbit, i2v int2vector,
  a_i4 int4[], a_i8 int8[], a_t text[], a_b bool[], a_f8 float8[], a_f4 float4[],
  a_tstz timestamptz[], a_j json[], a_jb jsonb[], a_by bytea[], a_n numeric[], a_u uuid[],
  a_i2d int2[][], a_m mood[], a_box box[], a_d date[], a_dom posint[]
);
INSERT INTO every (id) VALUES (1);
INSERT INTO every VALUES (2,
  -32768, -2147483648, -9223372036854775808, 4294967295, true, 1.1, 0.1, 'NaN', 'héllo "w" \ ☃',
  'varchar', 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-01-02', '2026-01-02 03:04:05.6',
  '2026-01-01 09:00:00.5+00', '23:59:59.999999', '12:00:00+05:30', '1 year 2 mons -3 days 04:05:06.7',
  '{"b": 1,  "a": [1, 2.50]}', '{"b": 1, "a": [1, 2.50]}', '\x00ff7f', 'happy', 7, '192.168.0.1/24',
  '[2026-01-01 00:00:00+00,infinity)', '(1.5,-2)', 12.34, '101', '1101', '1 2 3',
  '{1,NULL,-3}', '{9223372036854775807}', '{"a b","NULL",NULL,"x\"y\\z","",plain,"{}","é"}',
  '{t,f,NULL}', '{1.5,NaN,Infinity,-Infinity,-0,1e21,1e-7,0.1}', '{1.1,3.4028235e38,1e-45}',
  '{"2026-01-01 09:00:00.5+00",infinity,-infinity,"0044-03-15 10:00:00+00 BC",NULL}',
  ARRAY['{"a": 1}', '[1, 2]', 'null']::json[], '{"{\"a\": 1}",NULL,"\"s\""}', '{"\\x00ff",NULL}', '{1.50,NaN,-0}',
  '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '[0:1][1:2]={{1,2},{3,4}}', '{sad,NULL,happy}',
  ARRAY['(0,0),(1,1)'::box, '(2,2),(3,3)'], '{2026-01-02,infinity}', '{1,2}');
INSERT INTO every (id, f8, f4, tstz, ts, d, i8, by, t, a_t) VALUES
  (3, 'Infinity', '-Infinity', 'infinity', 'infinity', '-infinity', 9223372036854775807, '\x', '', '{}'),
  (4, '-0', 'NaN', '-infinity', '0044-03-15 10:00:00 BC', '0044-03-15 BC', 0, '\x', E'tab\there\nnl', '{{a,b},{c,d}}'),
  (5, 'NaN', '-0', '0044-03-15 10:00:00+00 BC', '10000-01-01', '10000-01-01', 1, NULL, NULL, '{NULL}'),
  (6, '1e-300', '1e-38', '10000-01-01 00:00:00+00', '1999-12-31 23:59:59.999999', '1970-01-01', -1, NULL, NULL, NULL),
  (7, '5e-324', '0.3', '1900-01-01 00:00:00+00', NULL, NULL, NULL, NULL, NULL, NULL),
  (8, NULL, NULL, '1969-12-31 23:59:59.999999+00', NULL, NULL, NULL, NULL, NULL, NULL),
  (9, NULL, NULL, '2000-01-01 00:00:00+00', NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO every (id, f4, f8, tstz, a_f4)
  SELECT 100 + g, (random() * 10 ^ (random() * 60 - 30))::float4, random() * 10 ^ (random() * 600 - 300),
         '1800-01-01'::timestamptz + random() * interval '400 years',
         ARRAY[(random() * 1000)::float4, (random() * 1e-6)::float4]
  FROM generate_series(1, 500) g;
`

// TestSnapshotMatchesStreamDecoding checks that the snapshot's binary fast
// path and the stream's text decoding give identical values for the same
// stored row, for every kind of column, under several session time zones.
func TestSnapshotMatchesStreamDecoding(t *testing.T) {
	t.Parallel()
	conn, uri := testDB(t)
	mustExec(t, conn, everyTypeSchema)
	ti := discoverOne(t, conn, "every")
	r := NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{ChunkRows: 64})
	snap, _ := readAll(t, r, 64)
	if len(snap) != 509 {
		t.Fatalf("snapshot read %d rows, want 509", len(snap))
	}
	// The fast path was taken: binary for uuid/timestamptz/int, text else.
	for name, bin := range map[string]bool{"u": true, "tstz": true, "i8": true, "f4": true, "by": true, "n": false, "a_i4": false, "dom": false} {
		if r.b.binary[indexOf(ti, name)] != bin {
			t.Errorf("column %s read in binary = %v, want %v", name, !bin, bin)
		}
	}
	cols := make([]string, len(ti.Columns))
	for i, c := range ti.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM every ORDER BY id"

	// The reader set SessionParams on conn: its text output is the stream's.
	compare(t, "UTC", ti, snap, textRows(t, conn, q, len(cols)), nil)

	// timestamptz text from any session time zone normalises to the same
	// UTC value (St_Johns: -03:30; Amsterdam 1900: LMT +00:19:32).
	tsCols := map[string]bool{"tstz": true, "a_tstz": true}
	other := connectTo(t, uri)
	for _, tz := range []string{"Asia/Kolkata", "America/St_Johns", "Europe/Amsterdam"} {
		mustExec(t, other, "SET TimeZone = '"+tz+"'")
		compare(t, tz, ti, snap, textRows(t, other, q, len(cols)), tsCols)
	}

	// Spot checks of the SPEC §3 forms.
	row2 := snap[1]
	want := map[string]model.Value{
		"i8": model.Int(math.MinInt64), "o": model.Int(4294967295), "b": model.Int(1),
		"f4": model.Real(1.1), "n": model.Text("NaN"), "c": model.Text("ab   "),
		"tstz": model.Text("2026-01-01 09:00:00.5Z"), "by": model.Blob([]byte{0, 0xff, 0x7f}),
		"j": model.Text(`{"b": 1,  "a": [1, 2.50]}`), "jb": model.Text(`{"a": [1, 2.50], "b": 1}`),
		"dom": model.Text("7"), "i2v": model.Text("1 2 3"),
		"a_b": model.Text("[1,0,null]"), "a_f8": model.Text("[1.5,null,null,null,0,1e+21,1e-7,0.1]"),
		"a_f4": model.Text("[1.1,3.4028235e+38,1e-45]"), "a_i2d": model.Text("[[1,2],[3,4]]"),
		"a_tstz": model.Text(`["2026-01-01 09:00:00.5Z","9999-12-31 23:59:59Z","0000-01-01 00:00:00Z",null,null]`),
		"a_j":    model.Text(`[{"a": 1},[1, 2],null]`), "a_jb": model.Text(`[{"a": 1},null,"s"]`),
		"a_t":   model.Text(`["a b","NULL",null,"x\"y\\z","","plain","{}","é"]`),
		"a_box": model.Text(`["(1,1),(0,0)","(3,3),(2,2)"]`), "a_dom": model.Text(`["1","2"]`),
	}
	for i, c := range ti.Columns {
		if w, ok := want[c.Name]; ok && !row2[i].Equal(w) {
			t.Errorf("row 2 column %s = %v, want %v", c.Name, row2[i], w)
		}
		if !snap[0][i].IsNull() && c.Name != "id" {
			t.Errorf("row 1 column %s = %v, want NULL", c.Name, snap[0][i])
		}
	}
	if v := snap[2][indexOf(ti, "tstz")]; v.Str() != "9999-12-31 23:59:59Z" {
		t.Errorf("infinity = %v", v)
	}
	if v := snap[4][indexOf(ti, "tstz")]; !v.IsNull() {
		t.Errorf("BC timestamptz = %v, want NULL", v)
	}
}

func compare(t *testing.T, what string, ti TableInfo, snap [][]model.Value, text [][][]byte, only map[string]bool) {
	t.Helper()
	if len(text) != len(snap) {
		t.Fatalf("%s: %d text rows, %d snapshot rows", what, len(text), len(snap))
	}
	bad := 0
	for r := range snap {
		for i, c := range ti.Columns {
			if only != nil && !only[c.Name] {
				continue
			}
			v, err := DecodeText(c, text[r][i])
			if err != nil {
				t.Errorf("%s: row %v: %v", what, snap[r][0], err)
				continue
			}
			same := v.Equal(snap[r][i])
			if v.Kind() == model.KindReal {
				same = same && math.Float64bits(v.Float64()) == math.Float64bits(snap[r][i].Float64())
			}
			if !same && bad < 10 {
				bad++
				t.Errorf("%s: row %v column %s: snapshot %v, stream text %q decodes to %v",
					what, snap[r][0], c.Name, snap[r][i], text[r][i], v)
			}
		}
	}
}

func indexOf(ti TableInfo, name string) int {
	for i, c := range ti.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// TestFloat4AgainstPostgres compares the binary float4 path with Postgres's
// own text output for many random bit patterns: Postgres's shortest-digit
// rule excludes the rounding bounds, Go's includes them.
func TestFloat4AgainstPostgres(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []float32{40751368, 82451456, 1.1, 16777216, 16777215, 3.4028235e38, 1.4e-45, 1.17549435e-38}
	for len(vals) < 200000 {
		f := math.Float32frombits(rng.Uint32())
		if f == f && !math.IsInf(float64(f), 0) {
			vals = append(vals, f)
		}
	}
	rows, err := conn.Query(testCtx(t), `SELECT v::text FROM unnest($1::float4[]) v`, vals)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i, bad := 0, 0
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			t.Fatal(err)
		}
		want, _ := strconv.ParseFloat(text, 64)
		if got := float4Value(vals[i]); got != want && bad < 10 {
			bad++
			t.Errorf("float4 %v (bits %08x): Postgres prints %s, binary path gives %v", vals[i], math.Float32bits(vals[i]), text, got)
		}
		i++
	}
	if err := rows.Err(); err != nil || i != len(vals) {
		t.Fatalf("%d rows, err %v", i, err)
	}
}
