package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks"
)

// The config-aware side of the sink registry: package sinks knows sink
// types and their settings, not config files, so the assembly maps a
// configured pipeline onto them here.

// OpenSink opens the sink of pipeline pl (a resolved pipeline,
// config.EffectivePipelines) with its registered factory, giving it the
// pipeline's name, log and the storage section (which only bucketstore
// reads). The caller owns the sink and closes it.
func OpenSink(ctx context.Context, cfg *config.Config, pl config.Pipeline, log *slog.Logger) (sinks.Sink, error) {
	st := cfg.Storage
	return sinks.Open(ctx, sinks.Config{Type: pl.Sink.Type, Settings: pl.Sink.Settings}, sinks.Env{
		Pipeline: pl.Name,
		Logger:   log,
		Storage: sinks.StorageConn{URI: st.URI, Schema: st.Schema, MaxConns: st.MaxConns,
			SynchronousCommit: st.SynchronousCommit, ConnectTimeout: st.ConnectTimeout},
	})
}

// CheckSinks checks, offline, that every pipeline of cfg names a
// registered sink type (config.CheckSinks) with settings its spec accepts
// (sinks.CheckSettings), and returns the problems as config errors at the
// file position of each key (config.Errors, sorted), or nil. Call it after
// every sink is registered and before opening any.
func CheckSinks(cfg *config.Config) error {
	errs := config.AsErrors(cfg.CheckSinks(sinks.Names()))
	for i, p := range cfg.EffectivePipelines() {
		for _, e := range joined(sinks.CheckSettings(sinks.Config{Type: p.Sink.Type, Settings: p.Sink.Settings})) {
			path, msg := fmt.Sprintf("pipelines[%d].sink.settings", i), e.Error()
			var se *sinks.SettingError
			if errors.As(e, &se) {
				if se.Key != "" {
					path += "." + se.Key
				}
				msg = se.Msg
			}
			ce := cfg.ErrorAt(path, errors.New(msg))
			ce.Msg = fmt.Sprintf("%s (sink %s)", msg, p.Sink.Type)
			errs = append(errs, ce)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	errs.Sort()
	return errs
}

// joined lists the errors of an errors.Join (err itself otherwise).
func joined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
