package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/telemetry"
	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/pipeline/otelpipeline"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

var roles = []string{"all", "api", "replication", "replication:streaming", "replication:snapshot"}

// runRun replicates (and, with role all or api, serves the sync API of
// bucket storage; a config without storage serves nothing) until
// interrupted. The stage-time summary of the run is logged at exit.
func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	path := configFlag(fs)
	role := fs.String("role", "all", "what this process does: all, api, replication, replication:streaming or replication:snapshot")
	cpuProfile := fs.String("cpu-profile", "", "write a Go CPU profile of the whole run to this file (for `go tool pprof`)")
	trace := fs.String("trace", "", "trace exporter for this run, overriding telemetry.tracing.exporter: none, stdout (one JSON span per stage per batch on stdout) or otlp")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch *trace {
	case "", "none", "stdout", "otlp":
	default:
		return usagef("run: -trace %q: want none, stdout or otlp", *trace)
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	valid := false
	for _, r := range roles {
		valid = valid || r == *role
	}
	if !valid {
		return usagef("run: --role %q: want one of %v", *role, roles)
	}
	cfg, err := loadConfig(*path, stderr)
	if err != nil {
		return err
	}
	if _, err := loadRules(cfg, "1"); err != nil {
		for _, p := range ruleProblems(err) {
			fmt.Fprintln(stderr, p)
		}
		return usagef("%s: the sync rules have problems", *path)
	}
	log, err := telemetry.NewLogger(stderr, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return usagef("log: %v", err)
	}
	if *trace != "" {
		cfg.Telemetry.Tracing.Exporter = *trace
	}
	tel, err := telemetry.Setup(ctx, telemetryOptions(cfg, stdout))
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.API.ShutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}()
	// Without storage (only custom pipelines, no storage section) there is
	// nothing to serve: pipelines keep their state in state files.
	var store *bucketstore.Store
	if cfg.UsesStorage() {
		store, err = bucketstore.Open(ctx, bucketstore.Config{URI: cfg.Storage.URI, Schema: cfg.Storage.Schema,
			MaxConns: int32(cfg.Storage.MaxConns), SynchronousCommit: cfg.Storage.SynchronousCommit,
			ConnectTimeout: cfg.Storage.ConnectTimeout, Logger: log})
		if err != nil {
			return err
		}
		defer store.Close()
	} else if *role == "api" {
		return usagef("run: --role api serves bucket storage, and %s has no storage section", *path)
	}
	// Rules vs source tables and columns: warnings, as PowerSync reports
	// them (again in the background while the source does not answer).
	warnings, stopCheck := warnSourceSchema(ctx, cfg, *role, log, func(ctx context.Context, warnings []string) {
		if rules, err := cfg.SyncRules.Read(); err == nil && store != nil {
			if err := store.Catalog().SetRulesWarnings(ctx, string(rules), warnings); err != nil {
				log.Warn("sync rules' warnings not stored for status", "err", err)
			}
		}
	})
	defer stopCheck()
	if store == nil {
		if err := registerSlotGauges(tel.MeterProvider, stateLister{cfg}, cfg, log); err != nil {
			return err
		}
		log.Info("syncpipe starting without storage", "role", *role, "state_dir", cfg.StateDir, "metrics", tel.MetricsAddr())
	} else {
		if err := registerUnitGauges(tel.MeterProvider, store.Leases()); err != nil {
			return err
		}
		if err := registerSlotGauges(tel.MeterProvider, store.Catalog(), cfg, log); err != nil {
			return err
		}
		if err := registerStorageGauge(tel.MeterProvider, store.Compactor(), store.Catalog(), log); err != nil {
			return err
		}
		log.Info("syncpipe starting", "role", *role, "storage_schema", cfg.Storage.Schema, "metrics", tel.MetricsAddr())
	}

	if store != nil && (*role == "all" || *role == "api") {
		api, err := startAPI(ctx, cfg, store, tel, log)
		if err != nil {
			return err
		}
		defer api.shutdown(cfg.API.ShutdownTimeout)
		if *role == "api" {
			select {
			case <-ctx.Done():
				log.Info("syncpipe stopped")
				return nil
			case err := <-api.errc:
				return err
			}
		}
		// Under role all an API that fails stops replication too (see
		// apiFailure), so the process exits non-zero.
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		defer stop(nil)
		go func() {
			select {
			case err := <-api.errc:
				log.Error("sync API failed: stopping replication", "err", err)
				stop(err)
			case <-ctx.Done():
			}
		}()
	}
	summary := pipeline.NewSummary()
	var term io.Writer
	if telemetry.IsTerminal(stderr) {
		term = stderr
	}
	err = replication.RunPipelines(ctx, replication.Options{Config: cfg, Store: store, Logger: log, Role: *role, Terminal: term,
		MeterProvider: tel.MeterProvider, Reload: reloadOnSIGHUP(ctx, log), RulesWarnings: warnings,
		Tracer: pipeline.MultiTracer{otelpipeline.New(otelpipeline.Config{TracerProvider: tel.TracerProvider}), summary}})
	logSummary(log, summary)
	if af := (apiFailure{}); errors.As(context.Cause(ctx), &af) {
		return af
	}
	if ctx.Err() != nil {
		log.Info("syncpipe stopped")
		return nil
	}
	return err
}

// telemetryOptions maps the telemetry section; stdout-exported spans go to
// the command's stdout.
func telemetryOptions(cfg *config.Config, stdout io.Writer) telemetry.Options {
	tr := cfg.Telemetry.Tracing
	return telemetry.Options{ServiceName: tr.ServiceName, MetricsListen: cfg.Telemetry.MetricsListen,
		TraceExporter: tr.Exporter, OTLPEndpoint: tr.OTLPEndpoint, SampleRatio: tr.SampleRatio, TraceWriter: stdout}
}

// logSummary prints where the run's time went, per stage.
func logSummary(log *slog.Logger, s *pipeline.Summary) {
	if len(s.Stages()) == 0 {
		return
	}
	var b strings.Builder
	_ = s.WriteTable(&b)
	log.Info("stage-time summary\n" + b.String())
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, usagef("--cpu-profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// reloadOnSIGHUP returns a channel that receives a request whenever the
// process gets SIGHUP (requests arriving while one is pending merge),
// until ctx ends.
func reloadOnSIGHUP(ctx context.Context, log *slog.Logger) <-chan struct{} {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reading the sync rules again")
				select {
				case reload <- struct{}{}:
				default:
				}
			}
		}
	}()
	return reload
}
