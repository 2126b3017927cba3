package benchmarks

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/internal/pgcluster"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// Harness is what the scenarios that run syncpipe share: the binary, where
// its config files go and how its spans are exported.
type Harness struct {
	// Syncpipe is the syncpipe binary (BuildSyncpipe).
	Syncpipe string
	// Dir holds generated config files.
	Dir string
	// Trace is the child's trace exporter: "" or none, stdout or otlp. The
	// otlp endpoint comes from OTEL_EXPORTER_OTLP_ENDPOINT, which the child
	// inherits with the rest of the environment.
	Trace string
	// TraceOut receives the child's stdout (stdout-exported spans).
	TraceOut io.Writer
	// CPUProfileDir, if set, makes every child write a Go CPU profile of
	// its run there (`syncpipe run --cpu-profile`).
	CPUProfileDir string
	// Compare, if set, is a second syncpipe binary (say, a build of the
	// previous commit): P1 and P3 then run every syncpipe configuration
	// with both binaries, interleaved, and report the medians and the
	// ratio of Syncpipe's to Compare's per configuration (see variants).
	Compare string
}

// variant is one binary a scenario runs its syncpipe configurations with.
type variant struct {
	// suffix is appended to the row names: "" for Syncpipe, compareSuffix
	// for Compare.
	suffix string
	h      *Harness
}

// compareSuffix marks the rows measured with Harness.Compare.
const compareSuffix = " [old]"

// variants are the binaries to run: Syncpipe, and Compare if set.
func (h *Harness) variants() []variant {
	vs := []variant{{"", h}}
	if h.Compare != "" {
		old := *h
		old.Syncpipe, old.Compare = h.Compare, ""
		vs = append(vs, variant{compareSuffix, &old})
	}
	return vs
}

// interleaved returns vs in the order of the k-th measurement of a
// configuration: reversed every other time (A B, B A, A B, …), so that
// neither binary always runs first and a machine that grows busier or
// quieter during the run favours neither.
func interleaved[T any](vs []T, k int) []T {
	if k%2 == 0 {
		return vs
	}
	out := slices.Clone(vs)
	slices.Reverse(out)
	return out
}

// childOptions are the options of a child that runs config in role.
func (h *Harness) childOptions(config, role string) ChildOptions {
	return ChildOptions{Binary: h.Syncpipe, Dir: h.Dir, Config: config, Role: role, Stdout: h.TraceOut, CPUProfileDir: h.CPUProfileDir}
}

// SnapshotConfig is the part of a child's config a snapshot scenario varies.
type SnapshotConfig struct {
	Source, Storage string // database URIs
	SlotPrefix      string
	Rules           string // sync rules YAML
	Workers         int    // replication.workers_per_process
	ChunkRows       int
	SplitRows       int // 0 = the default (250k)
	FlushWriters    int // 0 = 2
	// ClusterData is the cluster's data directory, for its CPU time.
	ClusterData string
	// JSONLDir, if set, makes the run's one pipeline write to a jsonl sink
	// in this directory instead of bucket storage (P7).
	JSONLDir string
	// LeaseDuration and LeaseHeartbeat set replication.lease (0: the
	// defaults, 30 s and 10 s).
	LeaseDuration, LeaseHeartbeat time.Duration
}

// config renders a `syncpipe run` config for a snapshot run: JSON logs
// (the harness follows them), no metrics listener (children would fight
// over the port), the harness's trace exporter.
func (h *Harness) config(c SnapshotConfig) string {
	exporter := h.Trace
	if exporter == "" {
		exporter = "none"
	}
	split := ""
	if c.SplitRows > 0 {
		split = fmt.Sprintf(", split_rows: %d", c.SplitRows)
	}
	lease := ""
	if c.LeaseDuration > 0 || c.LeaseHeartbeat > 0 {
		var kv []string
		if c.LeaseDuration > 0 {
			kv = append(kv, "duration: "+c.LeaseDuration.String())
		}
		if c.LeaseHeartbeat > 0 {
			kv = append(kv, "heartbeat: "+c.LeaseHeartbeat.String())
		}
		lease = "  lease: {" + strings.Join(kv, ", ") + "}\n"
	}
	return fmt.Sprintf(`source: {uri: %q, slot_prefix: %q}
storage: {uri: %q, max_conns: 32, synchronous_commit: "off"}
sync_rules:
  content: |
%s
replication:
  workers_per_process: %d
  snapshot: {chunk_rows: %d%s, max_ranges_per_table: 8, flush_writers: %d}
%stelemetry: {metrics_listen: "", tracing: {exporter: %s, service_name: syncpipe-bench}}
log: {level: info, format: json}
`, c.Source, c.SlotPrefix, c.Storage, indent(c.Rules, "    "), max(c.Workers, 1), c.ChunkRows, split,
		max(c.FlushWriters, 2), lease, exporter) + jsonlPipeline(c.JSONLDir)
}

// start runs `syncpipe run --role replication:snapshot` on cfg.
func (h *Harness) start(ctx context.Context, cfg SnapshotConfig) (*Child, error) {
	return StartChild(ctx, h.childOptions(h.config(cfg), ""))
}

// snapshotRun is one measured snapshot by a syncpipe child process.
type snapshotRun struct {
	Sample
	Child ChildStats
}

// snapshotChild snapshots cfg.Source into cfg.Storage (a fresh database)
// with a child process and measures it: from its "syncpipe starting" to its
// "snapshot done" log line, machine CPU over that time, then the child's peak RSS,
// stage summary, and the ops and op bytes it stored.
func (h *Harness) snapshotChild(ctx context.Context, cfg SnapshotConfig) (snapshotRun, error) {
	var run snapshotRun
	cpu0, pg0 := readCPU(), clusterCPU(cfg.ClusterData)
	child, err := h.start(ctx, cfg)
	if err != nil {
		return run, err
	}
	// Timed from the child's first log line, written once storage is open
	// and migrated: process start-up and the one-time migration are not
	// snapshot work (the in-process harness before this one did the same).
	begin, waitErr := child.WaitFor(ctx, "syncpipe starting")
	var done time.Time
	if waitErr == nil {
		done, waitErr = child.WaitFor(ctx, "snapshot done")
	}
	cpu1 := readCPU()
	stats, stopErr := child.Stop()
	if waitErr != nil {
		return run, waitErr
	}
	if stopErr != nil {
		return run, stopErr
	}
	run.Duration = done.Sub(begin)
	run.OwnCPU = clusterCPU(cfg.ClusterData) - pg0 + stats.User + stats.System
	run.CPUBusy = busySince(cpu0, cpu1)
	run.PeakRSS = stats.PeakRSS
	run.Child = stats
	if cfg.JSONLDir != "" {
		run.Ops, run.Bytes, err = jsonlWritten(cfg.JSONLDir)
	} else {
		run.Ops, run.Bytes, err = storedOps(ctx, cfg.Storage)
	}
	if err != nil {
		return run, err
	}
	return run, dropPrefixSlots(ctx, cfg.Source, cfg.SlotPrefix)
}

// dropPrefixSlots drops the slots a snapshot-only run left on the source: an
// idle slot holds WAL back, and runs would pile them up to the limit.
func dropPrefixSlots(ctx context.Context, uri, prefix string) error {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return fmt.Errorf("drop slots: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE starts_with(slot_name, $1) AND NOT active`, prefix)
	if err != nil {
		return fmt.Errorf("drop slots: %w", err)
	}
	return nil
}

// storedOps counts the ops in storage and their data bytes.
func storedOps(ctx context.Context, uri string) (ops, bytes int64, err error) {
	conn, err := pgx.Connect(ctx, uri)
	if err != nil {
		return 0, 0, fmt.Errorf("count stored ops: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rel, err := opsRelation(ctx, conn)
	if err != nil {
		return 0, 0, err
	}
	err = conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(octet_length(data)), 0)::bigint FROM `+rel).Scan(&ops, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("count stored ops: %w", err)
	}
	return ops, bytes, nil
}

// startCluster starts a scenario's throwaway cluster (fsync on: the runs
// measure write cost) with a database for the source.
func startCluster(ctx context.Context, sourceDB string) (*pgcluster.Cluster, *pgx.Conn, error) {
	return startClusterWith(ctx, sourceDB, nil)
}

// startClusterWith is startCluster with extra postgresql.conf settings.
func startClusterWith(ctx context.Context, sourceDB string, settings map[string]string) (*pgcluster.Cluster, *pgx.Conn, error) {
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true, Settings: settings})
	if err != nil {
		return nil, nil, err
	}
	if err := cluster.CreateDatabase(ctx, sourceDB); err != nil {
		_ = cluster.Stop()
		return nil, nil, err
	}
	src, err := pgx.Connect(ctx, cluster.URI(sourceDB))
	if err != nil {
		_ = cluster.Stop()
		return nil, nil, fmt.Errorf("connect to the source: %w", err)
	}
	return cluster, src, nil
}

// startTodos is startCluster with the todo data set of size loaded into the
// source.
func startTodos(ctx context.Context, log io.Writer, size todos.Size) (*pgcluster.Cluster, *pgx.Conn, error) {
	cluster, src, err := startCluster(ctx, "app")
	if err != nil {
		return nil, nil, err
	}
	logf(log, "loading %d todos / %d lists…", size.Todos, size.Lists)
	if _, err := todos.Load(ctx, src, size); err != nil {
		src.Close(context.WithoutCancel(ctx))
		_ = cluster.Stop()
		return nil, nil, err
	}
	return cluster, src, nil
}

func indent(s, pre string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(pre + line + "\n")
	}
	return b.String()
}

// rate is rows per second of a sample.
func rate(s Sample) float64 { return float64(s.Rows) / max(s.Duration, time.Nanosecond).Seconds() }

// rowQuerier is a storage connection or pool.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// opsRelation is the storage relation that shows every group's ops with
// their bucket names: the bucket_ops view (storage version 2 keeps a
// group's ops in partitions of its own, by bucket id), or bucket_data in
// a storage that a build from before that view made (a comparison run's
// baseline).
func opsRelation(ctx context.Context, q rowQuerier) (string, error) {
	var view bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('syncpipe.bucket_ops') IS NOT NULL`).Scan(&view); err != nil {
		return "", fmt.Errorf("find the storage's ops: %w", err)
	}
	if view {
		return "syncpipe.bucket_ops", nil
	}
	return "syncpipe.bucket_data", nil
}
