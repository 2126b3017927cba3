package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sourcegraph/conc/pool"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/replication"
	"github.com/syncpipe/syncpipe/sinks"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// replicate runs every pipeline the config declares until ctx ends: the
// bucketstore pipeline through the replicator (groups, checkpoints,
// retirement), every other one through its own SinkRunner with the sink
// it names. A pipeline's failure that retrying cannot heal is stored and
// shown by status; only an error starting a pipeline ends the process.
func replicate(ctx context.Context, cfg *config.Config, store *bucketstore.Store, log *slog.Logger, opts replication.Options) error {
	replication.CreatePublications(ctx, cfg, log)
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError()
	for _, pl := range cfg.EffectivePipelines() {
		if pl.Sink.Type == config.SinkBucketstore {
			p.Go(func(ctx context.Context) error { return replication.New(opts).Run(ctx) })
			continue
		}
		sink, err := sinks.Open(ctx, pl, sinks.Env{Logger: log.With("pipeline", pl.Name), Config: cfg})
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
			r := replication.NewSinkRunner(replication.SinkOptions{Config: cfg, Pipeline: pl, Sink: sink, Store: store.Catalog(),
				Logger: log, Tracer: opts.Tracer, Role: opts.Role})
			if err := r.Run(ctx); err != nil {
				return fmt.Errorf("pipeline %s: %w", pl.Name, err)
			}
			return nil
		})
	}
	return p.Wait()
}
