package benchmarks

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Params are the knobs every scenario takes. Zero values mean "the
// scale's preset", so a flag given on the command line overrides exactly
// that knob.
type Params struct {
	// Scale is small (the whole set in minutes, for `task bench`) or full
	// (the SPEC §9 sizes).
	Scale   string
	Runs    int   // runs per configuration (median reported)
	Workers []int // worker or writer counts
	// Processes are the syncpipe process counts P2 runs with 1 worker each.
	Processes []int
	// ChunkRows is the snapshot chunk_rows or write batch size.
	ChunkRows int
	// Rows and Lists size the todo data set of scenarios that use it.
	Rows, Lists int
	// Sizes are the todo counts the scale scenario compares (empty: the
	// scale's preset).
	Sizes []int
	// Topologies are the storage topologies P3 measures (ParseTopologies;
	// empty: both).
	Topologies []string
	// For is how long the load scenario's changes arrive (0: the preset).
	For time.Duration
	Log io.Writer
	// Harness runs syncpipe as a child process.
	Harness *Harness
}

// Scenario is one registered benchmark scenario.
type Scenario struct {
	Name string
	// Spec is the SPEC §9 bar it measures (P1 …), "" for extra ones.
	Spec     string
	Describe string
	Run      func(ctx context.Context, p Params) (Result, error)
}

// Scales are the accepted -scale values.
var Scales = []string{"small", "full"}

// registry lists the scenarios in the order `-scenario all` runs them.
var registry = []Scenario{
	{Name: "idle", Spec: "P0", Describe: "a caught-up syncpipe with no source change, then one write a second, in both topologies: CPU, storage commits/s, WAL/s, the slot's confirmed_flush_lsn", Run: runIdleScenario},
	{Name: "snapshot", Spec: "P1", Describe: "initial snapshot of the todo data set vs the raw COPY→COPY ceiling", Run: runSnapshotScenario},
	{Name: "scaling", Spec: "P2", Describe: "snapshot of many tables by 1 process × 1, 2 and 3 workers and 2 and 3 processes × 1 worker; lease traffic; takeover after SIGKILL; resume without re-reads", Run: runScalingScenario},
	{Name: "streaming", Spec: "P3", Describe: "streaming 200k updates vs a decode-only consumer; replication lag at 5k changes/s", Run: runStreamingScenario},
	{Name: "drain", Spec: "P4", Describe: "a new client draining every bucket through POST /sync/stream", Run: runDrainScenario},
	{Name: "checksums", Spec: "P5", Describe: "incremental checkpoints to many clients: checksum queries and latency", Run: runChecksumsScenario},
	{Name: "checksums-streams", Spec: "P5-streams", Describe: "P5 on Sync Streams: 100 clients × 10 subscriptions to a parameterised stream", Run: runChecksumsStreamsScenario},
	{Name: "load", Spec: "Load", Describe: "1,000 sync connections while 5k changes/s stream in: commit → checkpoint_complete, RSS, memory per idle connection", Run: runLoadScenario},
	{Name: "load-ws", Spec: "Load", Describe: "the load scenario with its clients over WebSocket (RSocket), as the SDKs with connectionMethod 'web-socket'", Run: runLoadWSScenario},
	{Name: "compaction", Spec: "P8", Describe: "a bucket of rows updated many times: storage size and a new client's drain before and after compaction", Run: runCompactionScenario},
	{Name: "compaction-load", Spec: "P8", Describe: "compaction running while 2,000 changes/s stream in and 20 clients sync: replication lag with and without it, checksum failures", Run: runCompactionLoadScenario},
	{Name: "scale", Spec: "Scale", Describe: "issue 47: P1 (process start → first checkpoint), P3 (1k-row-txn catch-up, lag at 5k changes/s) and P4 at two data set sizes in both topologies, shared_buffers " + scaleSharedBuffers + ": rows/s, changes/s, lag, ops/s, storage bytes per row, storage CPU and buffer misses per change", Run: runScaleScenario},
	{Name: "write", Describe: "bucket storage write path vs raw COPY of the same rows", Run: runWriteScenario},
}

// Scenarios returns the registered scenarios in run order.
func Scenarios() []Scenario { return registry }

// Lookup finds a registered scenario by name.
func Lookup(name string) (Scenario, bool) {
	for _, s := range registry {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// pick returns v unless it is zero, then the preset for the scale.
func pick[T comparable](v T, small, full T, scale string) T {
	var zero T
	if v != zero {
		return v
	}
	if scale == "full" {
		return full
	}
	return small
}

func pickInts(v []int, small, full []int, scale string) []int {
	if len(v) > 0 {
		return v
	}
	if scale == "full" {
		return full
	}
	return small
}

func checkScale(p Params) error {
	for _, s := range Scales {
		if p.Scale == s {
			return nil
		}
	}
	return fmt.Errorf("unknown scale %q (want small or full)", p.Scale)
}

// runSnapshotScenario: full is SPEC §9 P1 (1M todos / 1k lists, workers
// 1, 2, 4); small keeps the shape at a tenth.
func runSnapshotScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	return RunSnapshot(ctx, SnapshotOptions{
		Todos:     pick(p.Rows, 100_000, 1_000_000, p.Scale),
		Lists:     pick(p.Lists, 100, 1000, p.Scale),
		Workers:   pickInts(p.Workers, []int{1, 2}, []int{1, 2, 4}, p.Scale),
		ChunkRows: pick(p.ChunkRows, 10_000, 10_000, p.Scale),
		Runs:      pick(p.Runs, 3, 3, p.Scale),
		Log:       p.Log, Harness: p.Harness})
}

// runScalingScenario: full is SPEC §9 P2 as issue 16 redefines it (200
// tables × 20k rows; 1 process × 1, 2 and 3 workers, 2 and 3 processes ×
// 1 worker, so that N processes × 1 worker meets 1 process × N workers for
// both N; takeover checks with the default lease and a 3 s one); small has
// a quarter of the tables and a quarter of the rows with the same two
// chunks per table. -rows sets the rows per table, -writers the
// single-process worker counts, -processes the process counts.
func runScalingScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	return RunScaling(ctx, ScalingOptions{
		Tables:       pick(0, 50, 200, p.Scale),
		RowsPerTable: pick(p.Rows, 5000, 20_000, p.Scale),
		Owners:       100,
		Configs: ScalingConfigs(pickInts(p.Workers, []int{1, 2, 3}, []int{1, 2, 3}, p.Scale),
			pickInts(p.Processes, []int{2, 3}, []int{2, 3}, p.Scale)),
		ChunkRows: pick(p.ChunkRows, 2500, 10_000, p.Scale),
		Runs:      pick(p.Runs, 3, 3, p.Scale),
		Takeovers: []LeaseSetting{{}, {Duration: 3 * time.Second, Heartbeat: time.Second}},
		Log:       p.Log, Harness: p.Harness})
}

// runWriteScenario is the storage write path measured in-process.
func runWriteScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	return RunWrite(ctx, WriteOptions{
		Rows:      pick(p.Rows, 100_000, 1_000_000, p.Scale),
		Lists:     pick(p.Lists, 100, 1000, p.Scale),
		BatchRows: pick(p.ChunkRows, 10_000, 10_000, p.Scale),
		Writers:   pickInts(p.Workers, []int{1, 2}, []int{1, 2}, p.Scale),
		Runs:      pick(p.Runs, 3, 3, p.Scale),
		Log:       p.Log})
}

// SmallDrainBaselineTimeout cuts the quadratic OR-chain drain off at
// small scale, where the whole set must finish in minutes.
const SmallDrainBaselineTimeout = 15 * time.Second

// runDrainScenario: full is SPEC §9 P4 ({10k,100k,1M} × {200,1k}); small
// drops the 1M size. -rows / -lists measure that one size.
func runDrainScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	opt := DrainOptions{Runs: pick(p.Runs, 3, 3, p.Scale), BaselineTimeout: 2 * time.Minute, Log: p.Log, Harness: p.Harness}
	if p.Scale == "small" {
		opt.Todos, opt.BaselineTimeout = SmallDrain, SmallDrainBaselineTimeout
	}
	if p.Rows > 0 {
		opt.Todos = []int{p.Rows}
	}
	if p.Lists > 0 {
		opt.Lists = []int{p.Lists}
	}
	return RunDrain(ctx, opt)
}

// runCompactionScenario runs P8: 1,000 todos × 1,000 updates at full
// scale; -rows sets the todos.
func runCompactionScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	opt := CompactionOptions{Rows: pick(p.Rows, 200, 1000, p.Scale), Updates: pick(0, 50, 1000, p.Scale),
		Runs: pick(p.Runs, 3, 3, p.Scale), Log: p.Log}
	return RunCompaction(ctx, opt)
}

// runCompactionLoadScenario runs P8's concurrent half with its scale
// preset (CompactionLoadPreset); -for sets a phase's length.
func runCompactionLoadScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	opt := CompactionLoadPreset(p.Scale)
	if p.For > 0 {
		opt.Load.For = p.For
	}
	if p.Runs > 0 {
		opt.Phases = 2 * p.Runs
	}
	opt.Load.Log, opt.Load.Harness = p.Log, p.Harness
	return RunCompactionLoad(ctx, opt)
}

// runChecksumsScenario runs P5 with its scale preset; -rows sets the
// global bucket's rows.
func runChecksumsScenario(ctx context.Context, p Params) (Result, error) {
	return runP5(ctx, p, ChecksumsPreset)
}

// runChecksumsStreamsScenario runs P5 on Sync Streams
// (ChecksumsStreamsPreset).
func runChecksumsStreamsScenario(ctx context.Context, p Params) (Result, error) {
	return runP5(ctx, p, ChecksumsStreamsPreset)
}

// runP5 runs P5 with preset's options for the scale.
func runP5(ctx context.Context, p Params, preset func(scale string) ChecksumsOptions) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	opt := preset(p.Scale)
	if p.Rows > 0 {
		opt.GlobalRows = p.Rows
	}
	opt.Log, opt.Harness = p.Log, p.Harness
	return RunChecksums(ctx, opt)
}

// runLoadScenario runs the load scenario with its scale preset (see
// LoadPreset).
func runLoadScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	opt := LoadPreset(p.Scale)
	if p.For > 0 {
		opt.For = p.For
	}
	opt.Runs, opt.Log, opt.Harness = p.Runs, p.Log, p.Harness
	return RunLoad(ctx, opt)
}

// runLoadWSScenario is runLoadScenario with WebSocket clients.
func runLoadWSScenario(ctx context.Context, p Params) (Result, error) {
	if err := checkScale(p); err != nil {
		return Result{}, err
	}
	opt := LoadPreset(p.Scale)
	if p.For > 0 {
		opt.For = p.For
	}
	opt.WebSocket = true
	opt.Log, opt.Harness = p.Log, p.Harness
	return RunLoad(ctx, opt)
}
