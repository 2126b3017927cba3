package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// SnapshotOptions configures the P1 snapshot scenario.
type SnapshotOptions struct {
	Todos, Lists int
	Workers      []int // workers_per_process values to measure
	ChunkRows    int
	Runs         int
	Log          io.Writer
	// Harness runs syncpipe as a child process (required).
	Harness *Harness
}

// RunSnapshot measures SPEC §9 P1: the initial snapshot of the todo data
// set (source and storage are two databases of one cluster) by a
// `syncpipe run` child process with several worker counts, next to the raw
// COPY→COPY ceiling for the same storage rows measured in the same run: the
// source tables COPYed out while the very rows syncpipe stored are COPYed
// into index-identical tables. With Harness.Compare every configuration is
// also run with the second binary, the two interleaved (variants,
// interleaved), into rows marked compareSuffix, and a table of new/old
// ratios is added.
func RunSnapshot(ctx context.Context, opt SnapshotOptions) (Result, error) {
	res := Result{Scenario: "snapshot", Date: time.Now(),
		Params: fmt.Sprintf("P1: %d todos / %d lists, rules global + by_list, chunk_rows %d, median of %d runs, one cluster (fsync on), storage synchronous_commit=off; syncpipe runs as a child process (`syncpipe run --role replication:snapshot`), timed from its \"syncpipe starting\" log line (storage open and migrated) to its \"snapshot done\" log line",
			opt.Todos, opt.Lists, opt.ChunkRows, opt.Runs) + opt.Harness.compareParams()}
	if opt.Harness == nil {
		return res, fmt.Errorf("snapshot scenario: no syncpipe harness")
	}
	cluster, src, err := startTodos(ctx, opt.Log, todos.Size{Lists: opt.Lists, Todos: opt.Todos, Seed: 42})
	if err != nil {
		return res, err
	}
	defer cluster.Stop()
	defer src.Close(context.WithoutCancel(ctx))
	sourceRows := int64(opt.Todos + opt.Lists)

	var rows rowSet
	var raw []rawBatch
	stages, oldStages := &Breakdown{}, &Breakdown{}
	const ceiling = "raw COPY→COPY ceiling"
	for _, w := range opt.Workers {
		for _, v := range opt.Harness.variants() {
			rows.reserve(fmt.Sprintf("syncpipe, %d worker(s)", w)+v.suffix, ceiling) // new, then old
		}
	}
	rows.reserve(p7Name, ceiling)
	run, k := 0, 0
	for r := range opt.Runs {
		for _, w := range opt.Workers {
			k++
			for _, v := range interleaved(opt.Harness.variants(), k-1) {
				run++
				db := fmt.Sprintf("storage_%d", run)
				if err := cluster.CreateDatabase(ctx, db); err != nil {
					return res, err
				}
				s, err := v.h.snapshotChild(ctx, SnapshotConfig{Source: cluster.URI("app"), Storage: cluster.URI(db),
					SlotPrefix: db + "_", Rules: todos.Rules, Workers: w, ChunkRows: opt.ChunkRows, SplitRows: 100000,
					ClusterData: filepath.Join(cluster.Dir(), "data")})
				if err != nil {
					return res, err
				}
				s.Rows = sourceRows
				if v.suffix == "" {
					stages.Add(s.Child.Stages)
				} else {
					oldStages.Add(s.Child.Stages)
				}
				res.PeakRSS = max(res.PeakRSS, s.PeakRSS)
				name := fmt.Sprintf("syncpipe, %d worker(s)", w) + v.suffix
				rows.add(name, ceiling, s.Sample)
				if v.suffix == "" {
					rows.byName[name].Workers = w // the chart's series: the binary under test
				}
				logf(opt.Log, "run %d: %s: %.0f rows/s, peak RSS %s", r+1, name, rate(s.Sample), fmtBytes(s.PeakRSS))
				if raw != nil {
					continue
				}
				pool, err := pgxpool.New(ctx, cluster.URI(db)+"&search_path=syncpipe")
				if err != nil {
					return res, fmt.Errorf("open storage: %w", err)
				}
				raw, err = dumpStored(ctx, pool, opt.ChunkRows)
				pool.Close()
				if err != nil {
					return res, err
				}
			}
		}
		if err := runP7(ctx, opt, cluster, r, sourceRows, &rows, &res); err != nil {
			return res, err
		}
		cpu0, own0 := readCPU(), clusterCPU(filepath.Join(cluster.Dir(), "data"))+selfCPU()
		s, err := rawCopyCopy(ctx, cluster, fmt.Sprintf("raw_%d", r), raw, 2*max(slices.Max(opt.Workers), 1))
		if err != nil {
			return res, err
		}
		s.Rows, s.CPUBusy = sourceRows, busySince(cpu0, readCPU())
		s.OwnCPU = clusterCPU(filepath.Join(cluster.Dir(), "data")) + selfCPU() - own0
		rows.add(ceiling, "", s)
		logf(opt.Log, "run %d: raw COPY→COPY: %.0f rows/s", r+1, rate(s))
	}
	res.Rows = rows.list()
	res.Stages = stages
	if opt.Harness.Compare != "" {
		res.StagesOf = "over the new build's runs"
	}
	res.Bars = snapshotBars(res, ceiling)
	if n := compareNote(res.Rows, "source rows/s"); n != "" {
		res.Notes = append(res.Notes, n)
		if len(oldStages.Stages) > 0 {
			var sb strings.Builder
			_ = oldStages.WriteTable(&sb)
			res.Notes = append(res.Notes, fmt.Sprintf("Stage-time summary over the old build's runs (busiest stage per worker: **%s**):\n\n```\n%s```",
				oldStages.Busiest(), sb.String()))
		}
	}
	return res, nil
}

// runP7 is one P7 run (see jsonl.go) with the binary under test: the
// same snapshot as P1 at 2 workers, into a fresh jsonl directory.
func runP7(ctx context.Context, opt SnapshotOptions, cluster *pgcluster.Cluster, run int, sourceRows int64, rows *rowSet, res *Result) error {
	db := fmt.Sprintf("storage_p7_%d", run)
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "syncpipe-p7-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s, err := opt.Harness.snapshotChild(ctx, SnapshotConfig{Source: cluster.URI("app"), Storage: cluster.URI(db),
		SlotPrefix: db + "_", Rules: todos.Rules, Workers: 2, ChunkRows: opt.ChunkRows, SplitRows: 100000,
		ClusterData: filepath.Join(cluster.Dir(), "data"), JSONLDir: dir})
	if err != nil {
		return err
	}
	s.Rows = sourceRows
	res.PeakRSS = max(res.PeakRSS, s.PeakRSS)
	rows.add(p7Name, "raw COPY→COPY ceiling", s.Sample)
	logf(opt.Log, "run %d: %s: %.0f rows/s, %s written, peak RSS %s", run+1, p7Name, rate(s.Sample), fmtBytes(s.Bytes), fmtBytes(s.PeakRSS))
	return nil
}

// snapshotBars decides P1 on the default worker count (2) when it was
// measured, else on the first configuration.
func snapshotBars(res Result, ceiling string) []Bar {
	var pick *Row
	var ceil float64
	for i, r := range res.Rows {
		med, _, _ := r.rate(func(s Sample) int64 { return s.Rows })
		switch {
		case r.Name == ceiling:
			ceil = med
		case r.Workers == 2:
			pick = &res.Rows[i]
		case r.Workers > 0 && pick == nil:
			pick = &res.Rows[i]
		}
	}
	if pick == nil || ceil == 0 {
		return nil
	}
	med, _, _ := pick.rate(func(s Sample) int64 { return s.Rows })
	note := ""
	if res.Stages != nil {
		note = "busiest stage: " + res.Stages.Busiest()
	}
	ratio := med / ceil
	return []Bar{
		{ID: "P1", Measure: "snapshot vs raw COPY→COPY ceiling", Bar: "≥ 60% of the ceiling",
			Value: fmt.Sprintf("%s: %.0f rows/s = %.0f%% of %.0f", pick.Name, med, 100*ratio, ceil), Met: ratio >= 0.6, Note: noteIf(ratio < 0.6, note)},
		{ID: "P1", Measure: "snapshot vs PowerSync (≈ 6k rows/s)", Bar: "≥ 5× = 30k rows/s",
			Value: fmt.Sprintf("%s: %.0f rows/s = %.1f×", pick.Name, med, med/6000), Met: med >= 30000, Note: noteIf(med < 30000, note)},
	}
}

func noteIf(cond bool, note string) string {
	if cond {
		return note
	}
	return ""
}

// dumpStored cuts the stored rows (current rows, ops, parameter entries)
// into per-chunk binary COPY streams.
func dumpStored(ctx context.Context, pool *pgxpool.Pool, chunk int) ([]rawBatch, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	dump := func(q string) ([][]byte, error) {
		var buf bytes.Buffer
		if _, err := conn.Conn().PgConn().CopyTo(ctx, &buf, q); err != nil {
			return nil, fmt.Errorf("dump rows: %w", err)
		}
		return splitTuples(buf.Bytes())
	}
	cur, err := dump("COPY (SELECT " + rawCurrentCols + " FROM current_data3 ORDER BY ctid) TO STDOUT (FORMAT binary)")
	if err != nil {
		return nil, err
	}
	ops, err := dump("COPY (SELECT " + rawOpsCols + " FROM bucket_data2 ORDER BY ctid) TO STDOUT (FORMAT binary)")
	if err != nil {
		return nil, err
	}
	var out []rawBatch
	perRow := float64(len(ops)) / float64(max(len(cur), 1))
	for lo := 0; lo < len(cur); lo += chunk {
		hi := min(lo+chunk, len(cur))
		olo, ohi := int(float64(lo)*perRow), int(float64(hi)*perRow)
		if hi == len(cur) {
			ohi = len(ops)
		}
		out = append(out, rawBatch{current: joinTuples(cur[lo:hi]), ops: joinTuples(ops[olo:ohi]),
			rows: int64(hi - lo), nops: int64(ohi - olo)})
	}
	return out, nil
}

// rawCopyCopy is the ceiling: COPY the source tables out (as the snapshot
// reads them) while COPYing the same storage rows syncpipe wrote into
// index-identical tables over conns connections.
func rawCopyCopy(ctx context.Context, cluster *pgcluster.Cluster, db string, batches []rawBatch, conns int) (Sample, error) {
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		return Sample{}, err
	}
	pool, err := pgxpool.New(ctx, cluster.URI(db)+"&synchronous_commit=off&pool_max_conns=32")
	if err != nil {
		return Sample{}, err
	}
	defer pool.Close()
	if err := bucketstore.Migrate(ctx, pool, "syncpipe"); err != nil {
		return Sample{}, err
	}
	if _, err := pool.Exec(ctx, createRawSQL); err != nil {
		return Sample{}, err
	}
	srcConn, err := pgx.Connect(ctx, cluster.URI("app"))
	if err != nil {
		return Sample{}, err
	}
	defer srcConn.Close(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var readErr error
	start := time.Now()
	wg.Go(func() {
		for _, t := range []string{"lists", "todos"} {
			if _, err := srcConn.PgConn().CopyTo(ctx, io.Discard, "COPY "+t+" TO STDOUT (FORMAT binary)"); err != nil {
				readErr = err
				return
			}
		}
	})
	s, err := writeRaw(ctx, pool, batches, conns)
	wg.Wait()
	s.Duration = time.Since(start)
	if err == nil {
		err = readErr
	}
	return s, err
}
