package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sourcegraph/conc/pool"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// RunPipelines runs every pipeline o.Config declares until ctx ends: the
// bucketstore pipeline through the Replicator (groups, checkpoints,
// retirement; it needs o.Store), every other one through its own
// SinkRunner with the sink it names, opened from the registry (OpenSink;
// register custom sinks and check the config with CheckSinks first). Those
// keep their state in storage when the config has a storage section, and
// in state files (StateFiles, at config.StateFile) when it has none, so a
// program of custom pipelines needs no storage database. A pipeline's
// failure that retrying cannot heal is stored and shown by status; only
// sync rules that do not parse and an error starting a pipeline end the
// run.
func RunPipelines(ctx context.Context, o Options) error {
	cfg := o.Config
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var state SinkStorage
	switch {
	case o.Store != nil:
		state = o.Store.Catalog()
	case cfg.UsesStorage():
		return errors.New("run pipelines: the config has bucket storage, but no storage was opened (Options.Store)")
	default:
		state = NewStateFiles(cfg.StateFile)
	}
	// Rules that do not parse fail every pipeline on every retry: say so
	// once, before anything starts.
	rules, err := cfg.SyncRules.Read()
	if err == nil {
		_, err = syncrules.Parse(rules, syncrules.Options{File: "sync rules", GroupID: "0"})
	}
	if err != nil {
		return fmt.Errorf("run pipelines: %w", err)
	}
	CreatePublications(ctx, cfg, log)
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError()
	for _, pl := range cfg.EffectivePipelines() {
		if pl.Sink.Type == config.SinkBucketstore {
			p.Go(func(ctx context.Context) error { return New(o).Run(ctx) })
			continue
		}
		sink, err := OpenSink(ctx, cfg, pl, log.With("pipeline", pl.Name))
		if err != nil {
			_ = p.Wait()
			return err
		}
		p.Go(func(ctx context.Context) error {
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.API.ShutdownTimeout)
				defer cancel()
				if err := sink.Close(cctx); err != nil {
					log.Warn("closing the sink", "pipeline", pl.Name, "err", err)
				}
			}()
			r := NewSinkRunner(SinkOptions{Config: cfg, Pipeline: pl, Sink: sink, Store: state,
				Logger: log, Tracer: o.Tracer, Role: o.Role})
			if err := r.Run(ctx); err != nil {
				return fmt.Errorf("pipeline %s: %w", pl.Name, err)
			}
			return nil
		})
	}
	return p.Wait()
}
