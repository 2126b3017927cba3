package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/replication"
	"github.com/syncpipe/syncpipe/internal/todos"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// SnapshotOptions configures the P1 snapshot scenario.
type SnapshotOptions struct {
	Todos, Lists int
	Workers      []int // workers_per_process values to measure
	ChunkRows    int
	Runs         int
	Log          io.Writer
}

// RunSnapshot measures SPEC §9 P1: the initial snapshot of the todo data
// set (source and storage are two databases of one cluster) with several
// worker counts, next to the raw COPY→COPY ceiling for the same storage
// rows measured in the same run: the source tables COPYed out while the
// very rows syncpipe stored are COPYed into index-identical tables.
func RunSnapshot(ctx context.Context, opt SnapshotOptions) (Result, error) {
	res := Result{Scenario: "snapshot", Date: time.Now(),
		Params: fmt.Sprintf("P1: %d todos / %d lists, rules global + by_list, chunk_rows %d, median of %d runs, one cluster (fsync on), storage synchronous_commit=off",
			opt.Todos, opt.Lists, opt.ChunkRows, opt.Runs)}
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
	if err != nil {
		return res, err
	}
	defer cluster.Stop()
	if err := cluster.CreateDatabase(ctx, "app"); err != nil {
		return res, err
	}
	src, err := pgx.Connect(ctx, cluster.URI("app"))
	if err != nil {
		return res, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	logf(opt.Log, "loading %d todos / %d lists…", opt.Todos, opt.Lists)
	if _, err := todos.Load(ctx, src, todos.Size{Lists: opt.Lists, Todos: opt.Todos, Seed: 42}); err != nil {
		return res, err
	}
	sourceRows := int64(opt.Todos + opt.Lists)

	var rows rowSet
	var raw []rawBatch
	summary := pipeline.NewSummary()
	run := 0
	for r := range opt.Runs {
		for _, w := range opt.Workers {
			run++
			db := fmt.Sprintf("storage_%d", run)
			s, pool, err := snapshotOnce(ctx, cluster, db, w, opt.ChunkRows, summary)
			if err != nil {
				return res, err
			}
			s.Rows = sourceRows
			name := fmt.Sprintf("syncpipe, %d worker(s)", w)
			rows.add(name, "raw COPY→COPY ceiling", s)
			logf(opt.Log, "run %d: %s: %.0f rows/s", r+1, name, float64(s.Rows)/s.Duration.Seconds())
			if raw == nil {
				if raw, err = dumpStored(ctx, pool, opt.ChunkRows); err != nil {
					pool.Close()
					return res, err
				}
			}
			pool.Close()
		}
		s, err := rawCopyCopy(ctx, cluster, fmt.Sprintf("raw_%d", r), raw, 2*max(slices.Max(opt.Workers), 1))
		if err != nil {
			return res, err
		}
		s.Rows = sourceRows
		rows.add("raw COPY→COPY ceiling", "", s)
		logf(opt.Log, "run %d: raw COPY→COPY: %.0f rows/s", r+1, float64(s.Rows)/s.Duration.Seconds())
	}
	res.Rows = rows.list()
	var sb strings.Builder
	_ = summary.WriteTable(&sb)
	res.Notes = append(res.Notes, "Stage-time summary over all syncpipe runs:\n\n```\n"+sb.String()+"```",
		fmt.Sprintf("Peak RSS of the benchmark process (syncpipe runs in it): %s.", peakRSS()))
	return res, nil
}

// snapshotOnce replicates the source into a fresh storage database and
// returns when the snapshot is done.
func snapshotOnce(ctx context.Context, cluster *pgcluster.Cluster, db string, workers, chunk int, tracer pipeline.StageTracer) (Sample, *pgxpool.Pool, error) {
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		return Sample{}, nil, err
	}
	cfg, err := config.LoadBytes("bench.yaml", fmt.Appendf(nil, `
source: {uri: %q, slot_prefix: %q}
storage: {uri: %q}
sync_rules:
  content: |
%s
replication:
  workers_per_process: %d
  snapshot: {chunk_rows: %d, split_rows: 100000, max_ranges_per_table: 8, flush_writers: 2}
`, cluster.URI("app"), db+"_", cluster.URI(db), indent(todos.Rules, "    "), workers, chunk))
	if err != nil {
		return Sample{}, nil, err
	}
	store, err := bucketstore.Open(ctx, bucketstore.Config{URI: cfg.Storage.URI, MaxConns: 32, SynchronousCommit: "off"})
	if err != nil {
		return Sample{}, nil, err
	}
	defer store.Close()
	done := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := replication.New(replication.Options{Config: cfg, Store: store, Tracer: tracer, Role: "replication:snapshot",
		OnSnapshotDone: func(int) { close(done) }})
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- rep.Run(rctx) }()
	select {
	case <-done:
	case err := <-errc:
		return Sample{}, nil, fmt.Errorf("replication stopped: %w", err)
	}
	s := Sample{Duration: time.Since(start)}
	cancel()
	<-errc
	st := store.Stats()
	s.Ops, s.Bytes = st.Ops, st.Bytes
	pool, err := pgxpool.New(ctx, cluster.URI(db)+"&search_path=syncpipe")
	return s, pool, err
}

func indent(s, pre string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(pre + line + "\n")
	}
	return b.String()
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
	cur, err := dump("COPY (SELECT " + rawCurrentCols + " FROM current_data ORDER BY ctid) TO STDOUT (FORMAT binary)")
	if err != nil {
		return nil, err
	}
	ops, err := dump("COPY (SELECT " + rawOpsCols + " FROM bucket_data ORDER BY ctid) TO STDOUT (FORMAT binary)")
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
	if _, err := pool.Exec(ctx, `CREATE TABLE raw_current (LIKE syncpipe.current_data INCLUDING ALL);
		CREATE TABLE raw_ops (LIKE syncpipe.bucket_data INCLUDING ALL)`); err != nil {
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

// peakRSS reads the process's peak resident set size.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:"))
		}
	}
	return "unknown"
}
