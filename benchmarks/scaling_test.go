package benchmarks

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStatementKind classifies the statements storage runs for leases,
// as pg_stat_statements shows them (normalised), apart from the writes
// whose fence reads the leases table in a sub-select.
func TestStatementKind(t *testing.T) {
	for q, want := range map[string]string{
		"INSERT INTO leases (name, owner, token, expires_at, pid, backend_start)\nVALUES ($1, $2, $3, now() + $4::interval, $5, $6)\nON CONFLICT (name) DO UPDATE": "acquire",
		"SET LOCAL lock_timeout = '5s'": "claim",
		"SET lock_timeout = '5s'":       "session",
		"\nWITH u AS (\n  SELECT * FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS u(name, table_id, range_no, ord)\n), claimed AS (\n  INSERT INTO leases AS l (name)": "claimbatch",
		"SELECT owner <> $2 AND pid IS NOT NULL FROM leases WHERE name = $1 FOR NO KEY UPDATE":                                                                                            "holder",
		"UPDATE leases SET expires_at = now() + $4::interval, pid = $5, backend_start = $6\n\t\tWHERE name = $1":                                                                          "renew",
		"UPDATE leases SET expires_at = now() - interval $4, pid = NULL, backend_start = NULL\n\t\tWHERE name = $1":                                                                       "release",
		"SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()":                                                                                                    "session",
		"\nWITH live AS (\n  SELECT name FROM leases l WHERE l.expires_at >= now()":                                                                                                       "unitcounts",
		"begin":    "txn",
		"COMMIT":   "txn",
		"rollback": "txn",
		"DELETE FROM op_reservations WHERE id = $1 AND EXISTS (SELECT $4 FROM leases WHERE name = $2 AND token = $3 FOR SHARE)": "other",
		"INSERT INTO snapshot_ranges (source_table_id, range_no) SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM leases)":             "other",
		"SELECT range_no FROM snapshot_ranges WHERE source_table_id = $1":                                                       "other",
		"COPY current_data (group_id) FROM STDIN BINARY":                                                                        "other",
	} {
		if got := statementKind(q); got != want {
			t.Errorf("statementKind(%q) = %s, want %s", q, got, want)
		}
	}
}

// TestCountStatements: a claim is 5 statements (with its BEGIN and
// COMMIT), the harness's own polling is left out.
func TestCountStatements(t *testing.T) {
	c := countStatements([]statementStat{
		{query: "begin", calls: 12, time: 12 * time.Millisecond},
		{query: "commit", calls: 10, time: 10 * time.Millisecond},
		{query: "rollback", calls: 2},
		{query: "SET LOCAL lock_timeout = '5s'", calls: 4, time: 4 * time.Millisecond},
		{query: "SELECT owner <> $2 AND pid IS NOT NULL FROM leases WHERE name = $1 FOR NO KEY UPDATE", calls: 4},
		{query: "INSERT INTO leases (name) VALUES ($1)", calls: 4, rows: 3},
		{query: "UPDATE leases SET expires_at = now() - interval $4 WHERE name = $1", calls: 3},
		{query: "UPDATE leases SET expires_at = now() + $4::interval WHERE name = $1", calls: 1},
		{query: "COPY bucket_data (group_id) FROM STDIN BINARY", calls: 20, time: 80 * time.Millisecond},
		{query: benchTag + "SELECT count(*) FROM syncpipe.source_tables WHERE snapshot_done", calls: 500},
	})
	want := StatementCounts{Total: 60, Lease: 4*5 + 3 + 1, Acquires: 4, Acquired: 3, Renewals: 1, Releases: 3,
		TotalTime: 106 * time.Millisecond, LeaseTime: 4*time.Millisecond + 8*(22*time.Millisecond)/24}
	if *c != want {
		t.Fatalf("counts %+v, want %+v", *c, want)
	}
	if got := c.leaseShare(); got != 24.0/60 {
		t.Errorf("lease share %v, want 0.4", got)
	}
	if got := c.pingShare(); got != 29.0/65 {
		t.Errorf("share with pings %v, want 29/65", got)
	}
}

func scalingRow(p, w int, rates ...float64) Row {
	r := Row{Name: ScalingConfig{p, w}.String(), Processes: p, Workers: w}
	for _, rate := range rates {
		d := time.Duration(float64(time.Second) * 100000 / rate)
		r.Samples = append(r.Samples, Sample{Duration: d, Rows: 100000, OwnCPU: d, SyncpipeCPU: d / 4, PostgresCPU: 3 * d / 4,
			Statements: &StatementCounts{Total: 1000, Lease: 5, Acquires: 1}})
	}
	return r
}

// TestScalingBars decides the bars on the medians (even counts: the mean
// of the middle two) and names the per-run pairs.
func TestScalingBars(t *testing.T) {
	rows := []Row{scalingRow(1, 1, 10000, 12000), scalingRow(1, 2, 20000, 22000), scalingRow(2, 1, 19000, 19000), scalingRow(3, 1, 18000, 20000)}
	bars := scalingBars(rows, 10)
	if len(bars) != 2 {
		t.Fatalf("%d bars without 1 process × 3 workers, want 2: %+v", len(bars), bars)
	}
	if b := bars[0]; !b.Met || !strings.Contains(b.Value, "19000 vs 21000 rows/s = 90.5 %; per-run pairs 0.95, 0.86") {
		t.Errorf("2 processes bar %+v", b)
	}
	if b := bars[1]; !b.Met || !strings.Contains(b.Value, "0.50 %") {
		t.Errorf("lease bar %+v", b)
	}
	if got := versusBestSingle(rows); !strings.Contains(got, "19000 rows/s = 90.5 % of 1 process × 2 workers (21000)") {
		t.Errorf("3 processes vs the best single process: %q", got)
	}
	withThree := append(slices.Clone(rows), scalingRow(1, 3, 22000, 22000))
	bars = scalingBars(withThree, 10)
	if len(bars) != 3 {
		t.Fatalf("%d bars with 1 process × 3 workers, want 3: %+v", len(bars), bars)
	}
	if b := bars[1]; b.Met || !strings.Contains(b.Value, "19000 vs 22000 rows/s = 86.4 %") || !strings.Contains(b.Measure, "3 processes × 1 worker vs 1 process × 3 workers") {
		t.Errorf("3 processes bar %+v, want not met at 86.4 %%", b)
	}
	rows[2] = scalingRow(2, 1, 15000, 16000)
	if b := scalingBars(rows, 10)[0]; b.Met || !strings.Contains(b.Note, "CPU per 1k rows") {
		t.Errorf("2 processes at 74 %%: %+v, want not met with the CPU note", b)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4 = %v, want 2.5", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3 = %v, want 2", got)
	}
}

func TestScalingConfigs(t *testing.T) {
	cs := ScalingConfigs([]int{1, 2}, []int{1, 2, 3})
	if got := configNames(cs); got != "1 process × 1 worker, 1 process × 2 workers, 2 processes × 1 worker, 3 processes × 1 worker" {
		t.Errorf("configs %s", got)
	}
	if got := (LeaseSetting{}).String(); got != "lease 30s, heartbeat 10s (the defaults)" {
		t.Errorf("default lease %q", got)
	}
	if got := (LeaseSetting{3 * time.Second, time.Second}).String(); got != "lease 3s, heartbeat 1s" {
		t.Errorf("short lease %q", got)
	}
	h := &Harness{}
	cfg := h.config(SnapshotConfig{Rules: "x", LeaseDuration: 3 * time.Second, LeaseHeartbeat: time.Second})
	if !strings.Contains(cfg, "  lease: {duration: 3s, heartbeat: 1s}\ntelemetry:") {
		t.Errorf("config lacks the lease:\n%s", cfg)
	}
	if strings.Contains(h.config(SnapshotConfig{Rules: "x"}), "lease") {
		t.Error("a config without a lease setting names one")
	}
}

// TestWriteSVGProcessSeries: rows of several processes are a second
// series, from the 1-worker point, against their workers in all.
func TestWriteSVGProcessSeries(t *testing.T) {
	res := Result{Scenario: "scaling", Rows: []Row{scalingRow(1, 1, 10000), scalingRow(1, 2, 20000), scalingRow(2, 1, 19000), scalingRow(3, 1, 18000)}}
	var b strings.Builder
	if ok, err := WriteSVG(&b, res); !ok || err != nil {
		t.Fatalf("WriteSVG: %v, %v", ok, err)
	}
	svg := b.String()
	for _, want := range []string{"2 processes × 1 workers: 19000 rows/s", "3 processes × 1 workers: 18000 rows/s", "N processes × 1 worker", "workers in all"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Errorf("%d series, want 2", n)
	}
}
