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
	"github.com/syncpipe/syncpipe/syncapi"
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

// The sync API's HTTP server bounds what a connection may cost before it
// is a stream (issue 17): headers within apiHeaderTimeout, the body
// within syncapi.BodyReadTimeout (the whole request, for /metrics, within
// both), headers of at most syncapi.HTTPMaxHeaderBytes (a JWT and an
// SDK's headers are a few KiB; the 1 MiB default let each stalled
// connection hold a megabyte; the API itself answers a JSON 431 above
// syncapi.MaxHeaderBytes), keep-alive connections closed after apiIdleTimeout — above
// the 60 s idle timeout common in load balancers, so that they, not the
// server, close an idle connection and never send a request into one
// being closed.
const (
	apiHeaderTimeout = 10 * time.Second
	apiIdleTimeout   = 90 * time.Second
)

// pendingConnLimit bounds the API's connections that are not sync
// streams (syncapi.ConnGuard): 1024, or max_concurrent_connections when
// larger (every client reconnecting at once, e.g. after a deploy), but
// never more than half the file descriptors the streams leave — the rest
// stays for the storage and source pools, the listener and files, so that
// stalled clients cannot take the descriptors /healthz and new streams
// need. nofile 0 is an unknown limit.
func pendingConnLimit(nofile uint64, streams int) int {
	want := max(1024, streams)
	if nofile == 0 {
		return want
	}
	nofile = min(nofile, 1<<30) // RLIM_INFINITY
	spare := (int64(nofile) - int64(streams)) / 2
	return int(max(16, min(int64(want), spare)))
}

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
		Groups: store.Catalog(), Store: store.Reader(), Sources: store.Reader(), Auth: api.Auth,
		MaxBucketsPerConnection: api.MaxBucketsPerConnection, MaxParameterQueryResults: api.MaxParameterQueryResults,
		MaxConcurrentConnections: api.MaxConcurrentConnections,
		MaxDataFetchConcurrency:  api.MaxDataFetchConcurrency, ChecksumCacheSize: api.ChecksumCacheSize,
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
	guard, bound, nofile := newConnGuard(api.MaxConcurrentConnections, log)
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: apiHeaderTimeout,
		ReadTimeout: apiHeaderTimeout + syncapi.BodyReadTimeout, IdleTimeout: apiIdleTimeout,
		MaxHeaderBytes: syncapi.HTTPMaxHeaderBytes, ConnState: guard.ConnState, ConnContext: guard.ConnContext}
	ln := guard.Listener(a.ln)
	go func() {
		if err := a.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.errc <- apiFailure{err}
		}
	}()
	log.Info("sync API listening", "addr", a.ln.Addr().String(),
		"open_file_limit", nofile, "max_connections_not_streaming", bound)
	return a, nil
}

// newConnGuard raises the open file limit and builds the guard on the
// connections that are not streams, returning its bound and the limit.
func newConnGuard(streams int, log *slog.Logger) (*syncapi.ConnGuard, int, uint64) {
	nofile, err := raiseFileLimit()
	if err != nil {
		log.Warn("sync API: the open file limit stays as it is", "err", err, "open_file_limit", nofile)
	}
	bound := pendingConnLimit(nofile, streams)
	return syncapi.NewConnGuard(bound, log), bound, nofile
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
	switch err := a.srv.Shutdown(ctx); {
	case errors.Is(err, context.DeadlineExceeded):
		// Sync streams do not end by themselves: those still open when the
		// grace period ends are closed, and their clients reconnect. That
		// is how every stop with clients connected ends, not a fault.
		a.log.Info("sync API: open sync streams closed", "err", err)
	case err != nil:
		a.log.Warn("sync API shutdown", "err", err)
	}
	<-httpDone         // ends with ctx at the latest
	_ = a.http.Close() // connections still busy after the grace period
	a.source.Close()
}
