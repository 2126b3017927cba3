package postgres

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

var splitTables = map[string][]string{
	"int": {`CREATE TABLE t (id int8 PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT g * 3, 'v' FROM generate_series(1, 20000) g`},
	"uuid": {`CREATE TABLE t (id uuid PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT md5(g::text)::uuid, 'v' FROM generate_series(1, 20000) g`},
	"text": {`CREATE TABLE t (id text COLLATE "und-x-icu" PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT CASE WHEN g % 2 = 0 THEN upper(md5(g::text)) ELSE md5(g::text) END, 'v' FROM generate_series(1, 20000) g`},
	"composite": {`CREATE TABLE t (a text, b int, v text, PRIMARY KEY (a, b))`,
		`INSERT INTO t SELECT 'k' || (g % 13), g, 'v' FROM generate_series(1, 20000) g`},
}

func TestSplitRangesCoverKeySpaceOnce(t *testing.T) {
	t.Parallel()
	for name, setup := range splitTables {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn, _ := testDB(t)
			mustExec(t, conn, setup...)
			mustExec(t, conn, `ANALYZE t`)
			ti := discoverOne(t, conn, "t")
			want := expectKeys(t, conn, ti)
			for _, sm := range []sampling{
				defaultSampling,                     // TABLESAMPLE of ~20% of the pages
				{perRange: 50, minPerRange: 1},      // TABLESAMPLE of ~1%: coarse but still exact
				{perRange: 5, minPerRange: 1 << 30}, // every Nth key
			} {
				what := fmt.Sprintf("%+v", sm)
				ranges, err := splitRanges(testCtx(t), conn, ti, 4, 5000, sm)
				if err != nil {
					t.Fatal(err)
				}
				again, err := splitRanges(testCtx(t), conn, ti, 4, 5000, sm)
				if err != nil || !reflect.DeepEqual(ranges, again) {
					t.Errorf("%s: not deterministic: %v then %v (%v)", what, ranges, again, err)
				}
				if len(ranges) < 2 || len(ranges) > 4 || ranges[0].Lower != nil || ranges[len(ranges)-1].Upper != nil {
					t.Fatalf("%s: ranges %v", what, ranges)
				}
				var all [][]model.Value
				for i, rg := range ranges {
					if i > 0 && !reflect.DeepEqual(rg.Lower, ranges[i-1].Upper) {
						t.Fatalf("%s: range %d starts at %v, previous ends at %v", what, i, rg.Lower, ranges[i-1].Upper)
					}
					rows, _ := readAll(t, NewSnapshotReader(conn, ti, rg, SnapshotOptions{ChunkRows: 1500}), 1500)
					if len(rows) == 0 {
						t.Errorf("%s: range %d is empty", what, i)
					}
					if sm == defaultSampling && (len(rows) < len(want)/10 || len(rows) > len(want)/2) {
						t.Errorf("%s: range %d has %d of %d rows", what, i, len(rows), len(want))
					}
					all = append(all, rowKeys(ti, rows)...)
				}
				sameKeys(t, what, all, want)
			}
		})
	}
}

func TestSplitRangesSmallTable(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	mustExec(t, conn, `CREATE TABLE t (id int PRIMARY KEY)`, `INSERT INTO t SELECT generate_series(1, 100)`, `ANALYZE t`)
	ti := discoverOne(t, conn, "t")
	for _, c := range []struct {
		max   int
		split int64
	}{{4, 1000}, {1, 10}, {4, 0}} {
		ranges, err := SplitRanges(testCtx(t), conn, ti, c.max, c.split)
		if err != nil || !reflect.DeepEqual(ranges, []KeyRange{{}}) {
			t.Errorf("SplitRanges(%d, %d) = %v, %v; want one unbounded range", c.max, c.split, ranges, err)
		}
	}
	ranges, err := SplitRanges(testCtx(t), conn, ti, 8, 10)
	if err != nil || len(ranges) != 8 {
		t.Fatalf("100 rows, 8 ranges: %v, %v", ranges, err)
	}
}
