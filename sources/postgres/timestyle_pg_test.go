package postgres

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestTimeStylesAgainstPostgres reads temporal columns of a real table
// with the snapshot (binary timestamptz) and decodes Postgres's text output
// (the stream's input) in every style: both paths must agree, and the
// values must be PowerSync's. timestamp(3) keeps six digits: PowerSync's
// Postgres adapter uses microseconds for every column, whatever its
// precision modifier.
func TestTimeStylesAgainstPostgres(t *testing.T) {
	t.Parallel()
	conn, _ := testDB(t)
	mustExec(t, conn, `
CREATE TABLE temporal (id int PRIMARY KEY, tz timestamptz, ts timestamp, ts3 timestamp(3), tm time, tmtz timetz, d date,
  a_tz timestamptz[], a_ts timestamp[], a_tm time[]);
INSERT INTO temporal VALUES
  (1, '2024-01-02 05:04:05.12+02', '2024-01-02 03:04:05', '2024-01-02 03:04:05.1236', '12:13:14', '12:13:14+05:30', '2024-01-02',
   '{"2024-01-02 03:04:05+00",infinity,NULL}', '{"2024-01-02 03:04:05.5"}', '{12:13:14.25}'),
  (2, 'infinity', '-infinity', NULL, '23:59:59.999999', NULL, 'infinity', NULL, NULL, NULL);`)
	want := map[TimeStyle][2]map[string]string{
		TimeLegacy: {{
			"tz": "2024-01-02 03:04:05.12Z", "ts": "2024-01-02 03:04:05", "ts3": "2024-01-02 03:04:05.124", "tm": "12:13:14",
			"tmtz": "12:13:14+05:30", "d": "2024-01-02", "a_tz": `["2024-01-02 03:04:05Z","9999-12-31 23:59:59Z",null]`,
			"a_ts": `["2024-01-02 03:04:05.5"]`, "a_tm": `["12:13:14.25"]`,
		}, {"tz": "9999-12-31 23:59:59Z", "ts": "-infinity", "tm": "23:59:59.999999", "d": "infinity"}},
		TimeISOMicros: {{
			"tz": "2024-01-02T03:04:05.120000Z", "ts": "2024-01-02T03:04:05.000000", "ts3": "2024-01-02T03:04:05.124000", "tm": "12:13:14.000000",
			"tmtz": "12:13:14+05:30", "d": "2024-01-02", "a_tz": `["2024-01-02T03:04:05.000000Z","9999-12-31T23:59:59.000000Z",null]`,
			"a_ts": `["2024-01-02T03:04:05.500000"]`, "a_tm": `["12:13:14.250000"]`,
		}, {"tz": "9999-12-31T23:59:59.000000Z", "ts": "0000-01-01T00:00:00.000000", "tm": "23:59:59.999999", "d": "infinity"}},
		TimeISOMillis: {{
			"tz": "2024-01-02T03:04:05.120Z", "ts": "2024-01-02T03:04:05.000", "ts3": "2024-01-02T03:04:05.124", "tm": "12:13:14.000",
			"a_tz": `["2024-01-02T03:04:05.000Z","9999-12-31T23:59:59.000Z",null]`, "a_ts": `["2024-01-02T03:04:05.500"]`, "a_tm": `["12:13:14.250"]`,
		}, {"tz": "9999-12-31T23:59:59.000Z", "tm": "23:59:59.999"}},
		TimeISOSeconds: {{
			"tz": "2024-01-02T03:04:05Z", "ts": "2024-01-02T03:04:05", "ts3": "2024-01-02T03:04:05", "tm": "12:13:14",
			"a_tz": `["2024-01-02T03:04:05Z","9999-12-31T23:59:59Z",null]`,
		}, {"tz": "9999-12-31T23:59:59Z", "tm": "23:59:59"}},
	}
	base := discoverOne(t, conn, "temporal")
	cols := make([]string, len(base.Columns))
	for i, c := range base.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	for _, st := range allStyles {
		ti := base.WithTimeStyle(st)
		snap, _ := readAll(t, NewSnapshotReader(conn, ti, KeyRange{}, SnapshotOptions{ChunkRows: 8}), 8)
		compare(t, "style", ti, snap, textRows(t, conn, "SELECT "+strings.Join(cols, ", ")+" FROM temporal ORDER BY id", len(cols)), nil)
		for r, w := range want[st] {
			for name, s := range w {
				if got := snap[r][indexOf(ti, name)]; got.Str() != s {
					t.Errorf("style %d row %d column %s = %q, want %q", st, r+1, name, got.Str(), s)
				}
			}
		}
	}
	if base.Columns[1].Times != TimeLegacy {
		t.Error("WithTimeStyle changed the original columns")
	}
}
