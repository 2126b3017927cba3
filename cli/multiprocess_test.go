package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/bucketcheck"
)

// manyTables creates n tables t000… of rows rows each and returns sync
// rules putting every row of every table in one global bucket.
func manyTables(ctx context.Context, t *testing.T, e *streamEnv, n, rows int) string {
	t.Helper()
	var rules strings.Builder
	rules.WriteString("bucket_definitions:\n  all:\n    data:\n")
	for i := range n {
		e.exec(ctx, fmt.Sprintf(`CREATE TABLE t%03d (id int PRIMARY KEY, v text);
			INSERT INTO t%03d SELECT g, 'row ' || g FROM generate_series(1, %d) g`, i, i, rows))
		fmt.Fprintf(&rules, "      - SELECT id, v FROM t%03d\n", i)
	}
	return rules.String()
}

// expectedTables is what the rules of manyTables put in storage (group
// group), computed with SQL on the source.
func expectedTables(ctx context.Context, t *testing.T, e *streamEnv, n, group int) bucketcheck.State {
	t.Helper()
	st := bucketcheck.State{}
	bucket := fmt.Sprintf("%d#all[]", group)
	st[bucket] = map[string]string{}
	for i := range n {
		rows, err := e.src.Query(ctx, fmt.Sprintf(`SELECT id::text, row_to_json(t)::text FROM t%03d t`, i))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, data string
			if err := rows.Scan(&id, &data); err != nil {
				t.Fatal(err)
			}
			st[bucket][fmt.Sprintf("t%03d/%s", i, id)] = data
		}
		rows.Close()
	}
	return st
}

// TestProcessesShareTheSnapshot runs three `syncpipe run --role
// replication` processes with one worker each on one storage over a
// source of 60 tables: the snapshot's units are leased through storage,
// so every table is snapshotted once — each row has exactly one op — and
// every process does a share of the work. One process is SIGKILLed in the
// middle: its units are taken over by the others (a dead process's leases
// are free at once), and storage ends equal to the source, then streams.
func TestProcessesShareTheSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and syncpipe processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const tables, rows = 60, 2000
	e := newStreamEnv(t, envOptions{rules: "bucket_definitions: {}\n", env: []string{
		"SYNCPIPE_REPLICATION__WORKERS_PER_PROCESS=1",
		"SYNCPIPE_REPLICATION__LEASE__DURATION=3s",
		"SYNCPIPE_REPLICATION__LEASE__HEARTBEAT=1s",
	}})
	e.writeRules(manyTables(ctx, t, e, tables, rows))

	procs := make([]*child, 3)
	metrics := make([]string, len(procs))
	base := e.env
	for i := range procs {
		metrics[i] = freeAddr(t)
		e.env = append(slices.Clone(base), "SYNCPIPE_TELEMETRY__METRICS_LISTEN="+metrics[i])
		procs[i] = e.startWith(nil, "--role", "replication")
	}
	e.child = nil // several children: this test watches them itself
	t.Cleanup(func() {
		for _, c := range procs {
			if c != nil {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
				<-c.exited
			}
		}
	})
	const done = `"msg":"snapshot range done"`
	total := func() (n int) {
		for _, c := range procs {
			if c != nil {
				n += c.count(done)
			}
		}
		return n
	}
	// The autoscaling gauges, read from storage by every process: while
	// the snapshot runs no more units are active than workers exist.
	maxActive, sawPending := int64(0), false
	e.waitFor(ctx, "a third of the tables", func() bool {
		g := unitGauges(ctx, metrics[0])
		maxActive = max(maxActive, g["syncpipe_active_snapshot_count"])
		sawPending = sawPending || g["syncpipe_pending_snapshot_count"] > 0
		return total() >= tables/3
	})
	if !sawPending || maxActive > int64(len(procs)) || maxActive < 1 {
		t.Errorf("during the snapshot: pending seen %v, at most %d active snapshot units; want pending > 0 and 1…%d active", sawPending, maxActive, len(procs))
	}
	victim := procs[2]
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	<-victim.exited
	killedDid := victim.count(done)
	procs[2] = nil
	t.Logf("SIGKILLed one process after it finished %d of the %d tables finished so far", killedDid, total()+killedDid)

	e.converge(ctx, 2*time.Minute, func() bucketcheck.State { return expectedTables(ctx, t, e, tables, 1) })
	for i, c := range procs[:2] {
		select {
		case <-c.exited:
			c.mu.Lock()
			t.Fatalf("process %d exited: %v; its log:\n%s", i, c.err, tail(c.logs.String(), 4<<10))
		default:
		}
	}
	var dup int
	if err := e.storage.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM syncpipe.bucket_data
		GROUP BY bucket_name, object_type, object_id HAVING count(*) > 1) d`).Scan(&dup); err != nil {
		t.Fatal(err)
	}
	if dup > 0 {
		t.Fatalf("%d rows have more than one op: a table was snapshotted twice", dup)
	}
	shares := []int{procs[0].count(done), procs[1].count(done), killedDid}
	t.Logf("tables snapshotted per process: %v (the last one SIGKILLed)", shares)
	for i, n := range shares[:2] {
		if n < tables/5 {
			procs[i].mu.Lock()
			t.Errorf("process %d snapshotted %d of %d tables, want ≥ 20 %%; its log:\n%s", i, n, tables, tail(procs[i].logs.String(), 4<<10))
			procs[i].mu.Unlock()
		}
	}

	for i := range 2 {
		want := map[string]int64{"syncpipe_pending_snapshot_count": 0, "syncpipe_active_snapshot_count": 0,
			"syncpipe_total_stream_count": 1, "syncpipe_active_stream_count": 1}
		e.waitFor(ctx, fmt.Sprintf("process %d's gauges after the snapshot", i), func() bool {
			return maps.Equal(unitGauges(ctx, metrics[i]), want)
		})
	}

	// The stream runs in exactly one of the survivors.
	e.exec(ctx, "UPDATE t000 SET v = 'changed' WHERE id <= 10")
	e.converge(ctx, time.Minute, func() bucketcheck.State { return expectedTables(ctx, t, e, tables, 1) })
	streaming := 0
	for _, c := range procs[:2] {
		if c.count(`"msg":"streaming from the replication slot"`) > 0 {
			streaming++
		}
	}
	if streaming != 1 {
		t.Fatalf("%d surviving processes streamed the group, want exactly 1", streaming)
	}
}

// writeRules replaces the sync rules file the config names.
func (e *streamEnv) writeRules(rules string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// unitGauges scrapes the four autoscaling gauges from a /metrics endpoint
// (missing ones are absent from the map).
func unitGauges(ctx context.Context, addr string) map[string]int64 {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		for _, g := range unitGaugeSpecs {
			name := g.name
			rest, ok := strings.CutPrefix(l, name)
			if !ok || rest == "" || rest[0] != ' ' && rest[0] != '{' {
				continue
			}
			f := strings.Fields(rest)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[name] = int64(v)
			}
		}
	}
	return out
}
