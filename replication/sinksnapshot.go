package replication

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sourcegraph/conc/pool"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/stages"
)

// snapshotPlan is the stored key range plan of a sink pipeline's
// snapshot, per table ("schema.name").
type snapshotPlan map[string][]postgres.KeyRange

// snapshot reads every table in key ranges into the sink, at most
// replication.workers_per_process ranges at a time, each from its
// committed progress, and then records the snapshot as done.
func (r *SinkRunner) snapshot(ctx context.Context, conn *pgx.Conn) error {
	plan, err := r.plan(ctx, conn)
	if err != nil {
		return err
	}
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().
		WithMaxGoroutines(max(r.o.Config.Replication.WorkersPerProcess, 1))
	for _, name := range slices.Sorted(maps.Keys(plan)) {
		t := r.table(name)
		if t == nil {
			return fmt.Errorf("snapshot plan names %s, which the pipeline no longer replicates", name)
		}
		for no, kr := range plan[name] {
			p.Go(func(ctx context.Context) error { return r.snapshotRange(ctx, t, no, kr) })
		}
	}
	if err := p.Wait(); err != nil {
		return err
	}
	if err := r.o.Store.MarkSinkPipelineSnapshotDone(ctx, r.pl.Name); err != nil {
		return err
	}
	r.state.SnapshotDone = true
	r.log.Info("snapshot done", "version", r.state.Version)
	return nil
}

func (r *SinkRunner) table(name string) *sinkTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tables[name]
}

// plan returns the stored key ranges, planning and storing them first if
// this version has none: a resumed range must keep its bounds.
func (r *SinkRunner) plan(ctx context.Context, conn *pgx.Conn) (snapshotPlan, error) {
	var plan snapshotPlan
	if len(r.state.Plan) > 0 {
		return plan, json.Unmarshal(r.state.Plan, &plan)
	}
	snap := r.o.Config.Replication.Snapshot
	plan = snapshotPlan{}
	r.mu.Lock()
	tables := make([]*sinkTable, 0, len(r.tables))
	for _, t := range r.tables {
		tables = append(tables, t)
	}
	r.mu.Unlock()
	for _, t := range tables {
		ranges, err := postgres.SplitRanges(ctx, conn, t.info, snap.MaxRangesPerTable, int64(snap.SplitRows))
		if err != nil {
			return nil, err
		}
		plan[t.t.ID] = ranges
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return nil, err
	}
	stored, err := r.o.Store.SetSinkPipelinePlan(ctx, r.pl.Name, b)
	if err != nil {
		return nil, err
	}
	r.state.Plan = stored
	plan = snapshotPlan{}
	return plan, json.Unmarshal(stored, &plan)
}

// snapshotRange runs one range's pipeline from its committed progress:
// read → the shared chain (eval → build → flush → commit).
func (r *SinkRunner) snapshotRange(ctx context.Context, t *sinkTable, rangeNo int, kr postgres.KeyRange) error {
	name := t.t.ID
	pos, _, err := r.o.Sink.Resume(ctx, name, rangeNo)
	if err != nil || pos.Done {
		return err
	}
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	st := r.pl.Stages
	reader := postgres.NewSnapshotReader(conn, t.info, kr, postgres.SnapshotOptions{
		ChunkRows: st.ChunkRows, After: pos.LastKey, SocketTimeout: r.o.Config.Source.SnapshotSocketTimeout})
	p := pipeline.New[sinks.Position](pipeline.Config{Name: "snapshot " + name, Tracer: r.o.Tracer, Depth: 1,
		Labels: []pipeline.Label{{Key: "pipeline", Value: r.pl.Name}, {Key: "table", Value: name}, {Key: "range", Value: fmt.Sprint(rangeNo)}}})
	src := &rangeSource{reader: reader, spec: t.spec, table: name, rangeNo: rangeNo, rows: pos.RowsDone}
	read := pipeline.From(p, pipeline.StageConfig{Name: "read"}, pipeline.Source[stages.RowChange, sinks.Position](src))
	err = stages.Chain(ctx, read, r.o.Sink, stages.ChainConfig{EvalWorkers: r.evalWorkers(), FlushWriters: st.FlushWriters,
		OnRowError: r.rowError})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := p.Run(ctx); err != nil {
		return err
	}
	r.log.Info("snapshot range done", "table", name, "range", rangeNo, "rows", src.rows, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// evalWorkers is the pipeline's eval_workers, or the cores shared by the
// units that run at once.
func (r *SinkRunner) evalWorkers() int {
	if w := r.pl.Stages.EvalWorkers; w > 0 {
		return w
	}
	return max(1, runtime.GOMAXPROCS(0)/max(r.o.Config.Replication.WorkersPerProcess, 1))
}

// rowError logs a row whose sync rules failed for some query.
func (r *SinkRunner) rowError(t *model.Table, err error) {
	r.log.Warn("sync rules failed on a row", "table", t.String(), "err", err)
}
