package workers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/bucketcheck"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// manyTables creates n tables t000… of rows rows each and returns sync
// rules putting every row of every table in one global bucket.
func manyTables(ctx context.Context, e *harness.Env, n, rows int) string {
	e.T.Helper()
	var rules strings.Builder
	rules.WriteString("bucket_definitions:\n  all:\n    data:\n")
	for i := range n {
		e.Exec(ctx, fmt.Sprintf(`CREATE TABLE t%03d (id int PRIMARY KEY, v text);
			INSERT INTO t%03d SELECT g, 'row ' || g FROM generate_series(1, %d) g`, i, i, rows))
		fmt.Fprintf(&rules, "      - SELECT id, v FROM t%03d\n", i)
	}
	return rules.String()
}

// expectedTables is what the rules of manyTables put in storage (group
// group), computed with SQL on the source.
func expectedTables(ctx context.Context, e *harness.Env, n, group int) bucketcheck.State {
	t := e.T
	t.Helper()
	st := bucketcheck.State{}
	bucket := fmt.Sprintf("%d#all[]", group)
	st[bucket] = map[string]string{}
	parts := make([]string, n)
	for i := range n {
		parts[i] = fmt.Sprintf(`SELECT 't%03d/' || id, row_to_json(t)::text FROM t%03d t`, i, i)
	}
	rows, err := e.Src.Query(ctx, strings.Join(parts, " UNION ALL "))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, data string
		if err := rows.Scan(&key, &data); err != nil {
			t.Fatal(err)
		}
		st[bucket][key] = data
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}

// unitGaugeNames are the four autoscaling gauges of SPEC §5 (README,
// "Metrics").
var unitGaugeNames = []string{"syncpipe_total_stream_count", "syncpipe_active_stream_count",
	"syncpipe_pending_snapshot_count", "syncpipe_active_snapshot_count"}

// unitGauges scrapes the four autoscaling gauges from a /metrics endpoint
// (missing ones are absent from the map; nil if it does not answer).
func unitGauges(ctx context.Context, addr string) map[string]int64 {
	samples := harness.Scrape(ctx, addr)
	if samples == nil {
		return nil
	}
	out := map[string]int64{}
	for _, name := range unitGaugeNames {
		if v, ok := harness.Sample(samples, name); ok {
			out[name] = int64(v)
		}
	}
	return out
}

// TestProcessesShareTheSnapshot runs three `syncpipe run --role
// replication` processes with one worker each and one `--role api`
// process on one storage over a source of 200 tables (issue 16): the
// snapshot's units are leased through storage, so every table is
// snapshotted once — each row has exactly one op — and every replication
// process does at least a fifth of the units; the api process never
// replicates nor holds a lease, and its /metrics shows the same unit
// gauges. One process is SIGKILLed in the middle, after it did its fifth
// and while units are pending: the units it held are committed by the
// others within a lease duration + 5 s (a dead process's leases are free
// at once), and storage ends equal to the source, then streams from
// exactly one survivor.
func TestProcessesShareTheSnapshot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const tables, rows, replicators = 200, 500, 3
	// The takeover bound is lease + 5 s: the killed process's leases are
	// free at once (its storage session ended), so the 5 s margin is for
	// the survivors to notice and finish the units under -race on 2 busy
	// cores.
	const lease = 3 * time.Second
	const need = (tables + 4) / 5 // 20 % of the units: one key range per table, as small as they are
	e := harness.New(t, harness.Options{Rules: "bucket_definitions: {}\n", Env: []string{
		"SYNCPIPE_REPLICATION__WORKERS_PER_PROCESS=1",
		"SYNCPIPE_REPLICATION__LEASE__DURATION=" + lease.String(),
		"SYNCPIPE_REPLICATION__LEASE__HEARTBEAT=1s",
	}})
	e.WriteFile("rules.yaml", manyTables(ctx, e, tables, rows))
	started := time.Now()

	// procs[replicators] is the api process; it alone serves the sync API
	// (api.listen of the config), and every process has its own /metrics.
	// It is started last, so the Env's waits fail if it exits.
	procs := make([]*harness.Proc, replicators+1)
	metrics := make([]string, len(procs))
	for i := range procs {
		role := "replication"
		if i == replicators {
			role = "api"
		}
		metrics[i] = harness.FreeAddr(t)
		procs[i] = e.StartWith(harness.ProcConfig{Args: []string{"--role", role},
			Env: []string{"SYNCPIPE_TELEMETRY__METRICS_LISTEN=" + metrics[i]}})
	}
	api := procs[replicators]
	victim := -1
	// A process the test failed with stopped is SIGKILLed at the end like
	// the others (harness.Start).
	// alive fails the test when a process other than the victim exited.
	alive := func(what string) {
		t.Helper()
		for i, p := range procs {
			if i != victim && !p.Running() {
				t.Fatalf("%s: process %d exited: %v; its log:\n%s", what, i, p.Err(), p.Tail(4<<10))
			}
		}
	}
	// owner is the LIKE pattern of the lease owners of a process (see
	// processOwner: host/pid/random).
	owner := func(p *harness.Proc) string { return fmt.Sprintf("%%/%d/%%", p.Pid()) }
	const unitName = `'snapshot/' || r.source_table_id || '/' || r.range_no`
	// heldUnits are the unfinished snapshot units whose live lease p holds.
	heldUnits := func(p *harness.Proc) (names, tableNames []string) {
		q, err := e.Storage.Query(ctx, `SELECT l.name, t.table_name FROM syncpipe.leases l
			JOIN syncpipe.snapshot_ranges r ON l.name = `+unitName+`
			JOIN syncpipe.source_tables t ON t.id = r.source_table_id
			WHERE l.owner LIKE $1 AND l.expires_at > now() AND NOT r.done ORDER BY 1`, owner(p))
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		for q.Next() {
			var n, tn string
			if err := q.Scan(&n, &tn); err != nil {
				t.Fatal(err)
			}
			names, tableNames = append(names, n), append(tableNames, tn)
		}
		if err := q.Err(); err != nil {
			t.Fatal(err)
		}
		return names, tableNames
	}
	// pendingUnits counts the unfinished snapshot ranges nobody holds.
	pendingUnits := func() (n int) {
		if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.snapshot_ranges r
			WHERE NOT r.done AND NOT EXISTS (SELECT 1 FROM syncpipe.leases l
			  WHERE l.name = `+unitName+` AND l.expires_at > now())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const done = `"msg":"snapshot range done"`
	const streams = `"msg":"streaming from the replication slot"`
	total := func() (n int) {
		for _, p := range procs {
			n += p.Count(done)
		}
		return n
	}

	// Wait for a replication process that did a fifth of the units and
	// works on one while others are pending. It is stopped (SIGSTOP) to
	// read the units it holds, so that they are the ones it holds when
	// SIGKILLed; stopped in between two units it is let go on. Meanwhile
	// the autoscaling gauges, read from storage by every process: while
	// the snapshot runs no more units are active than workers exist.
	maxActive, sawPending, scraped := int64(0), false, time.Time{}
	var victimUnits, victimTables []string
	var pendingAtKill int
	e.WaitFor(ctx, "a replication process that did 20 % of the units and holds one, with units pending", func() bool {
		alive("during the snapshot")
		if time.Since(scraped) >= 200*time.Millisecond { // each scrape queries storage: not on every poll
			scraped = time.Now()
			g := unitGauges(ctx, metrics[replicators])
			maxActive = max(maxActive, g["syncpipe_active_snapshot_count"])
			sawPending = sawPending || g["syncpipe_pending_snapshot_count"] > 0
		}
		for i, p := range procs[:replicators] {
			if p.Count(done) < need {
				continue
			}
			p.Signal(syscall.SIGSTOP)
			names, tns := heldUnits(p)
			if pending := pendingUnits(); len(names) > 0 && pending > 0 {
				victim, victimUnits, victimTables, pendingAtKill = i, names, tns, pending
				return true
			}
			p.Signal(syscall.SIGCONT)
		}
		return false
	})
	if !sawPending || maxActive > replicators || maxActive < 1 {
		t.Errorf("during the snapshot: pending seen %v, at most %d active snapshot units; want pending > 0 and 1…%d active", sawPending, maxActive, replicators)
	}
	vp := procs[victim]
	killedAt := time.Now()
	vp.Kill()
	killedDid, doneAtKill := vp.Count(done), total()
	t.Logf("%v after the start: SIGKILLed process %d holding %v (tables %v) after it finished %d of the %d units finished so far, %d units pending",
		time.Since(started).Round(time.Millisecond), victim, victimUnits, victimTables, killedDid, doneAtKill, pendingAtKill)

	// The units it held are committed by the others within a lease
	// duration + 5 s.
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	e.WaitFor(tctx, "the killed process's units committed by the others", func() bool {
		alive("taking the killed process's units over")
		var n int
		if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.snapshot_ranges r
			WHERE r.done AND `+unitName+` = ANY($1)`, victimUnits).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(victimUnits)
	})
	tcancel()
	takeover := time.Since(killedAt)
	var finishers []int // who logged the units done
	for i, p := range procs[:replicators] {
		for _, tn := range victimTables {
			if p.Count(fmt.Sprintf(`%s,"group":1,"table":"public.%s"`, done, tn)) > 0 && !slices.Contains(finishers, i) {
				finishers = append(finishers, i)
			}
		}
	}
	t.Logf("the killed process's units were committed %v after the SIGKILL (lease %v), by process(es) %v", takeover.Round(time.Millisecond), lease, finishers)
	if takeover > lease+5*time.Second {
		t.Errorf("the killed process's units were committed %v after the SIGKILL, want ≤ lease duration %v + 5 s", takeover.Round(time.Millisecond), lease)
	}

	// The whole snapshot, checked cheaply first (the comparison with the
	// source reads all of storage).
	e.WaitFor(ctx, "every snapshot range done", func() bool {
		alive("finishing the snapshot")
		var all, finished int
		err := e.Storage.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE done) FROM syncpipe.snapshot_ranges`).Scan(&all, &finished)
		return err == nil && all == tables && finished == all
	})
	t.Logf("%v after the start: every snapshot range done", time.Since(started).Round(time.Millisecond))
	e.Converge(ctx, 2*time.Minute, func() bucketcheck.State { return expectedTables(ctx, e, tables, 1) })
	alive("after the snapshot")
	var dup int
	if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM syncpipe.bucket_ops
		GROUP BY bucket_name, object_type, object_id HAVING count(*) > 1) d`).Scan(&dup); err != nil {
		t.Fatal(err)
	}
	if dup > 0 {
		t.Fatalf("%d rows have more than one op: a table was snapshotted twice", dup)
	}
	shares := make([]int, replicators)
	sum := 0
	for i, p := range procs[:replicators] {
		shares[i] = p.Count(done)
		sum += shares[i]
	}
	t.Logf("units snapshotted per replication process: %v of %d (process %d SIGKILLed)", shares, tables, victim)
	for i, n := range shares {
		if n < need {
			t.Errorf("process %d snapshotted %d of %d units, want ≥ 20 %%; its log:\n%s", i, n, tables, procs[i].Tail(4<<10))
		}
	}
	// Each unit is finished by one process: the sum is the units, less at
	// most those of the victim whose last commit it had sent when stopped.
	if sum > tables || sum < tables-len(victimUnits) {
		t.Errorf("%d snapshot ranges done in all (%v), want %d: a unit was snapshotted twice or by nobody", sum, shares, tables)
	}

	watched := []int{replicators} // the api process, then the survivors
	for i := range replicators {
		if i != victim {
			watched = append(watched, i)
		}
	}
	want := map[string]int64{"syncpipe_pending_snapshot_count": 0, "syncpipe_active_snapshot_count": 0,
		"syncpipe_total_stream_count": 1, "syncpipe_active_stream_count": 1}
	for _, i := range watched {
		e.WaitFor(ctx, fmt.Sprintf("process %d's gauges after the snapshot", i), func() bool {
			alive("after the snapshot")
			return maps.Equal(unitGauges(ctx, metrics[i]), want)
		})
	}

	// The stream runs in exactly one of the survivors, never in the api
	// process.
	e.Exec(ctx, "UPDATE t000 SET v = 'changed' WHERE id <= 10")
	e.Converge(ctx, time.Minute, func() bucketcheck.State { return expectedTables(ctx, e, tables, 1) })
	alive("streaming")
	streaming := 0
	for _, i := range watched[1:] {
		if procs[i].Count(streams) > 0 {
			streaming++
		}
	}
	if streaming != 1 {
		t.Errorf("%d surviving processes streamed the group, want exactly 1", streaming)
	}
	// The api process: no unit run, no lease ever taken (lease rows are
	// never deleted, so one it took would still name it).
	var apiLeases int
	if err := e.Storage.QueryRow(ctx, `SELECT count(*) FROM syncpipe.leases WHERE owner LIKE $1`, owner(api)).Scan(&apiLeases); err != nil {
		t.Fatal(err)
	}
	if n, s := api.Count(done), api.Count(streams); n > 0 || s > 0 || apiLeases > 0 {
		t.Errorf("the api process replicated: %d snapshot ranges, %d streams, %d leases; its log:\n%s", n, s, apiLeases, api.Tail(4<<10))
	}
}
