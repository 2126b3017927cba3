package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/internal/telemetry"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sinks/bucketstore/syncapi"
)

// apiServer is the running sync API.
type apiServer struct {
	srv    *syncapi.Server
	http   *http.Server
	ln     net.Listener
	source *pgxpool.Pool
	log    *slog.Logger
	errc   chan error // an error of Serve: the API stopped serving
}

// apiFailure is the sync API having stopped serving after it started. It
// ends the whole process, whatever else runs in it: a process that goes on
// replicating without the API it was started with looks alive to its
// supervisor while clients cannot sync.
type apiFailure struct{ err error }

func (e apiFailure) Error() string {
	return fmt.Sprintf("the sync API stopped serving: %v (the process stops with it; restart it)", e.err)
}

func (e apiFailure) Unwrap() error { return e.err }

// wrapAPIListener, when set, wraps the API's listener (tests: a listener
// that fails, to make Serve return an error).
var wrapAPIListener func(net.Listener) net.Listener

// startAPI serves the sync API (and /metrics) on cfg.API.Listen.
func startAPI(ctx context.Context, cfg *config.Config, store *bucketstore.Store, tel *telemetry.Telemetry, log *slog.Logger) (*apiServer, error) {
	a := &apiServer{log: log, errc: make(chan error, 1)}
	pl, _ := cfg.BucketstorePipeline()
	pcfg, err := pgxpool.ParseConfig(pl.Source.URI)
	if err != nil {
		return nil, fmt.Errorf("source uri: %w", err)
	}
	pcfg.MaxConns = 2
	if a.source, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("source pool for write checkpoints: %w", err)
	}
	api := cfg.API
	// Not ctx's cancellation: ctx ends at SIGTERM, when open streams are
	// to get their grace period (shutdown), not be cut off.
	a.srv, err = syncapi.New(context.WithoutCancel(ctx), syncapi.Config{
		Store: store, Auth: api.Auth,
		MaxBucketsPerConnection: api.MaxBucketsPerConnection, MaxConcurrentConnections: api.MaxConcurrentConnections,
		MaxDataFetchConcurrency: api.MaxDataFetchConcurrency, ChecksumCacheSize: api.ChecksumCacheSize,
		MaxRequestBytes: int64(api.MaxRequestBytes), SourceLSN: a.sourceLSN, Logger: log,
		MeterProvider: tel.MeterProvider, TracerProvider: tel.TracerProvider,
		CORSOrigins: api.CORSOrigins,
	})
	if err != nil {
		a.source.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", tel.Handler())
	mux.Handle("/", a.srv.Handler())
	if a.ln, err = net.Listen("tcp", api.Listen); err != nil {
		a.srv.Close()
		a.source.Close()
		return nil, fmt.Errorf("listen for the sync API on %s: %w", api.Listen, err)
	}
	if wrapAPIListener != nil {
		a.ln = wrapAPIListener(a.ln)
	}
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := a.http.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.errc <- apiFailure{err}
		}
	}()
	log.Info("sync API listening", "addr", a.ln.Addr().String())
	return a, nil
}

// sourceLSN is the source position a write checkpoint waits for: a
// heartbeat message first, so that an idle stream reaches it promptly.
func (a *apiServer) sourceLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	err := a.source.QueryRow(ctx, `SELECT pg_logical_emit_message(false, 'syncpipe', 'ping')::text`).Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("read the source WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(s)
}

// Addr is the address the API listens on.
func (a *apiServer) Addr() string { return a.ln.Addr().String() }

// shutdown stops accepting connections, gives open sync streams the
// grace period to end, and then closes those left and the server. It
// returns within the grace period plus the moment closing streams takes.
func (a *apiServer) shutdown(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	a.log.Info("sync API shutting down: open sync streams get the grace period", "grace", grace)
	// http.Server.Shutdown closes the listener at once and then waits for
	// the connections, which streams keep busy until a.srv ends them.
	httpDone := make(chan struct{})
	go func() {
		_ = a.http.Shutdown(ctx)
		close(httpDone)
	}()
	if err := a.srv.Shutdown(ctx); err != nil {
		a.log.Warn("sync API shutdown", "err", err)
	}
	<-httpDone         // ends with ctx at the latest
	_ = a.http.Close() // connections still busy after the grace period
	a.source.Close()
}
