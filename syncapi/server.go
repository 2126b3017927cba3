package syncapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// ScopeName is the instrumentation scope of the server's spans and
// metrics.
const ScopeName = "github.com/syncpipe/syncpipe/syncapi"

// Config configures a Server. Zero limits take the defaults of
// config.Default (1000 buckets per connection, 200 connections, 10
// concurrent data fetches, 100000 checksum cache entries, 1 MiB bodies).
type Config struct {
	// Groups reads the replication groups (bucketstore.Store.Catalog in
	// production). Required.
	Groups GroupReader
	// Store reads what published checkpoints hold and keeps write
	// checkpoints (bucketstore.Store.Reader in production). Required.
	// The server depends only on the methods it calls (storage.go), so a
	// test serves the protocol from an in-memory fake.
	Store Storage
	// Sources builds the Checksums and Checkpoints left nil
	// (bucketstore.Store.Reader in production). Required unless both are
	// given.
	Sources Sources
	// Checksums serves bucket checksums to every stream. Nil (production):
	// New builds a *bucketstore.ChecksumCache of ChecksumCacheSize entries
	// from Sources. A test serving from a fake gives its own.
	Checksums ChecksumSource
	// Checkpoints delivers newly published checkpoints to streams. Nil
	// (production): New starts Sources' *bucketstore.CheckpointWatcher,
	// which Close stops and waits for. A given source is its owner's to
	// stop.
	Checkpoints CheckpointSource
	// Auth verifies client tokens (config.API.Auth). At least one audience
	// and one key source are required.
	Auth config.Auth
	// MaxBucketsPerConnection: a client entitled to more buckets (over
	// all its stream subscriptions) gets an error (PowerSync PSYNC_S2305)
	// instead of a partial sync.
	MaxBucketsPerConnection int
	// MaxParameterQueryResults: likewise for a client whose parameter
	// lookups match more stored rows.
	MaxParameterQueryResults int
	// MaxConcurrentConnections: streams beyond it are refused with 429.
	MaxConcurrentConnections int
	// MaxDataFetchConcurrency bounds concurrent bucket data queries across
	// all connections.
	MaxDataFetchConcurrency int
	// ChecksumCacheSize is the number of (bucket, checkpoint) entries of
	// the checksum cache shared by all connections.
	ChecksumCacheSize int
	// MaxRequestBytes bounds request bodies (413 beyond).
	MaxRequestBytes int64
	// SourceLSN returns the source database's current WAL position (after
	// a pg_logical_emit_message heartbeat, so replication reaches it soon)
	// for GET /write-checkpoint2.json. Nil disables write checkpoints
	// (503).
	SourceLSN func(ctx context.Context) (pglogrepl.LSN, error)
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// MeterProvider and TracerProvider default to the OTel globals.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Now is the clock for token validation and expiry (tests); default
	// time.Now.
	Now func() time.Time
	// KeepaliveInterval is the cadence of token_expires_in lines (default
	// 20 s).
	KeepaliveInterval time.Duration
	// BodyReadTimeout bounds the arrival of a request's body (default
	// BodyReadTimeout; tests shorten it).
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each line's write to a stream's client (default
	// a minute; tests shorten it).
	WriteTimeout time.Duration
	// CORSOrigins are the origins browser clients may call the API from
	// (config api.cors_origins): "*" allows any origin, as the PowerSync
	// service does; empty sends no CORS headers (same-origin only).
	CORSOrigins []string
	// Baseline selects older code paths that benchmarks measure as their
	// baselines through this very endpoint; production leaves it zero.
	Baseline Baseline
}

// Baseline is the one hook into the server's code paths, for benchmarks
// that compare a design with the one it replaced, in the same run. The
// zero value is production's.
type Baseline struct {
	// IgnoreChangeRecords ignores storage's change records: every stream
	// re-reads its parameter lookups and sums each of its buckets (since
	// the cached checkpoint) at every new checkpoint (P5's baseline). It
	// switches the cache New builds, so Config.Checksums must be nil.
	IgnoreChangeRecords bool
	// ReadShape selects the bucket data query: bucketstore.ReadORChain is
	// the shape the LATERAL read replaced (P4's baseline).
	ReadShape bucketstore.ReadShape
}

// supersedeAfter is Server.supersedeAfter's default: a newer checkpoint
// waits for a send shorter than this (a caught-up stream's few ops) and
// interrupts a longer one (a first sync).
const supersedeAfter = time.Second

// Server serves bucket storage to PowerSync clients. Create it with New;
// its Handler is safe for concurrent use.
type Server struct {
	cfg         Config
	groups      GroupReader
	store       Storage
	auth        *authenticator
	cache       ChecksumSource
	wcs         *writeCheckpoints // write checkpoint reads shared by streams
	reads       sharedReads       // bucket data reads shared by streams
	deltas      deltaReads        // checkpoints' new ops, read once for caught-up streams
	checkpoints CheckpointSource  // what streams subscribe to
	// watcher is the one New started, which Close waits for; nil when
	// Config.Checkpoints was given.
	watcher *bucketstore.CheckpointWatcher
	log     *slog.Logger
	tracer  trace.Tracer
	traced  bool // tracer records spans (not a no-op provider's)

	ctx    context.Context // canceled by Close: ends every stream
	cancel context.CancelFunc

	active   atomic.Int64  // open streams
	carried  atomic.Int64  // checksums streams kept without asking the cache
	fetchSem chan struct{} // bounds concurrent ReadBucketData calls

	mu      sync.Mutex
	closed  bool
	streams sync.WaitGroup
	rules   map[int]*syncrules.Rules // parsed rules per group

	connections metric.Int64UpDownCounter
	opsSynced   metric.Int64Counter
	bytesSent   metric.Int64Counter
	errorsGauge metric.Registration // syncpipe_replication_group_errors

	healthc healthCache // storage health read shared by /healthz and the gauge

	// supersedeAfter: how long a checkpoint's send runs before a newer
	// checkpoint interrupts it (sendData); tests set 0.
	supersedeAfter time.Duration
	// completeDelay: how long a WebSocket stream ending at its token's
	// expiry waits for its client to cancel it before COMPLETE
	// (wsOut.end); tests shorten it.
	completeDelay time.Duration

	// Test hooks: called after a data line was written, when a stream
	// handler has released its connection slot, and when a WebSocket
	// stream's line waits for the client's credit.
	afterDataLine func()
	streamDone    func()
	waitCredit    func()
}

// New validates cfg and starts the server's checkpoint watcher (run one
// Server per process: every stream shares the watcher and the checksum
// cache). The watcher stops when ctx ends or Close is called.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := checkStorage(&cfg); err != nil {
		return nil, err
	}
	def := config.Default().API
	if cfg.MaxBucketsPerConnection <= 0 {
		cfg.MaxBucketsPerConnection = def.MaxBucketsPerConnection
	}
	if cfg.MaxParameterQueryResults <= 0 {
		cfg.MaxParameterQueryResults = def.MaxParameterQueryResults
	}
	if cfg.MaxConcurrentConnections <= 0 {
		cfg.MaxConcurrentConnections = def.MaxConcurrentConnections
	}
	if cfg.MaxDataFetchConcurrency <= 0 {
		cfg.MaxDataFetchConcurrency = def.MaxDataFetchConcurrency
	}
	if cfg.ChecksumCacheSize <= 0 {
		cfg.ChecksumCacheSize = def.ChecksumCacheSize
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = int64(def.MaxRequestBytes)
	}
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = 20 * time.Second
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = BodyReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = writeTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	auth, err := newAuthenticator(cfg.Auth, cfg.Now, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("syncapi: %w", err)
	}
	meter := cfg.MeterProvider.Meter(ScopeName)
	conns, err := meter.Int64UpDownCounter("syncpipe_concurrent_connections",
		metric.WithDescription("Open sync streams, by transport (http, websocket)."), metric.WithUnit("{connection}"))
	if err != nil {
		return nil, fmt.Errorf("syncapi: create metric: %w", err)
	}
	ops, err := meter.Int64Counter("syncpipe_operations_synced",
		metric.WithDescription("Bucket operations sent to sync clients."), metric.WithUnit("{operation}"))
	if err != nil {
		return nil, fmt.Errorf("syncapi: create metric: %w", err)
	}
	sent, err := meter.Int64Counter("syncpipe_sync_sent_bytes",
		metric.WithDescription("Bytes of sync stream responses written to clients, as sent (compressed), by content type, content encoding and transport; over WebSocket what the connection writes, frames included (deflate: the connection compresses)."),
		metric.WithUnit("By"))
	if err != nil {
		return nil, fmt.Errorf("syncapi: create metric: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Server{bytesSent: sent, cfg: cfg, groups: cfg.Groups, store: cfg.Store, cache: cfg.Checksums, checkpoints: cfg.Checkpoints,
		auth: auth, log: cfg.Logger, tracer: cfg.TracerProvider.Tracer(ScopeName),
		ctx: sctx, cancel: cancel, fetchSem: make(chan struct{}, cfg.MaxDataFetchConcurrency),
		rules: map[int]*syncrules.Rules{}, connections: conns, opsSynced: ops, supersedeAfter: supersedeAfter,
		completeDelay: completeDelay}
	_, untraced := cfg.TracerProvider.(noop.TracerProvider)
	s.traced = !untraced
	if s.cache == nil {
		cache := cfg.Sources.NewChecksumCache(cfg.ChecksumCacheSize)
		if cfg.Baseline.IgnoreChangeRecords {
			cache.DisableChangeRecords()
		}
		s.cache = cache
	}
	if s.errorsGauge, err = s.registerGroupErrorGauge(meter); err != nil {
		cancel()
		return nil, fmt.Errorf("syncapi: create metric: %w", err)
	}
	s.wcs = newWriteCheckpoints(cfg.Store)
	if s.checkpoints == nil {
		// Started last: nothing after it can fail and leave it running.
		s.watcher = cfg.Sources.WatchCheckpoints(sctx)
		s.checkpoints = s.watcher
	}
	return s, nil
}

// checkStorage validates cfg's storage fields: without Sources, the
// checksum cache and the checkpoint watcher must be given, or streams
// would have no checksums or checkpoints.
func checkStorage(cfg *Config) error {
	switch {
	case isNil(cfg.Groups):
		return errors.New("syncapi: Config.Groups is required")
	case isNil(cfg.Store):
		return errors.New("syncapi: Config.Store is required")
	case cfg.Checksums == nil && isNil(cfg.Sources):
		return errors.New("syncapi: Config.Checksums is required without Config.Sources")
	case cfg.Checkpoints == nil && isNil(cfg.Sources):
		return errors.New("syncapi: Config.Checkpoints is required without Config.Sources")
	case cfg.Checksums != nil && cfg.Baseline.IgnoreChangeRecords:
		return errors.New("syncapi: Baseline.IgnoreChangeRecords switches the checksum cache New builds; leave Config.Checksums nil")
	}
	return nil
}

// isNil reports whether an interface holds nothing or a nil pointer (a
// *bucketstore.Reader of a Store not opened), which would fail only at
// the first request.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// ChecksumStats returns the counters of the checksum cache the server's
// streams share: checksum queries and buckets summed. Carried also counts
// the buckets streams kept from their previous checkpoint because the
// change records showed them unchanged (those never reach the cache).
func (s *Server) ChecksumStats() bucketstore.ChecksumStats {
	st := s.cache.Stats()
	st.Carried += s.carried.Load()
	return st
}

// Close ends every open stream, stops the checkpoint watcher New started
// (not a Config.Checkpoints source: that is its owner's) and waits for
// both. Requests arriving afterwards get 503. Call it (or Shutdown) when
// the HTTP server shuts down, since sync streams never end on their own.
func (s *Server) Close() {
	s.refuse()
	s.cancel()
	s.streams.Wait()
	if s.watcher != nil {
		<-s.watcher.Done()
	}
	_ = s.errorsGauge.Unregister()
}

// Shutdown closes the server gracefully: new streams are refused (503)
// at once, open ones go on until they end or ctx does, and then the
// server is closed as by Close. It returns an error wrapping ctx's when
// streams were still open at the deadline (they were closed). Stop the
// HTTP server's listener first (http.Server.Shutdown does) so clients
// are sent elsewhere rather than refused.
func (s *Server) Shutdown(ctx context.Context) error {
	s.refuse()
	drained := make(chan struct{})
	go func() {
		// Ends at the latest when Close below has ended every stream.
		s.streams.Wait()
		close(drained)
	}()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = fmt.Errorf("syncapi: closed %d sync streams still open at the end of the grace period: %w", s.active.Load(), ctx.Err())
	}
	s.Close()
	return err
}

// refuse makes begin refuse new streams. Streams register under mu and
// only while not closed, so no stream is added once the wait for them
// has started.
func (s *Server) refuse() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// Handler serves POST /sync/stream (HTTP streaming), GET /sync/stream
// (the WebSocket transport: websocket.go), GET /write-checkpoint2.json
// and GET /healthz, with CORS for Config.CORSOrigins, to requests whose
// headers fit in MaxHeaderBytes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sync/stream", s.handleStream)
	mux.HandleFunc("GET /sync/stream", s.handleWebSocket)
	mux.HandleFunc("GET /write-checkpoint2.json", s.handleWriteCheckpoint)
	mux.HandleFunc("POST /sync/checkpoint-request", s.handleCheckpointRequest)
	mux.HandleFunc("GET /healthz", s.handleHealth)
	return withHeaderLimit(withBodyDeadline(withCORS(s.cfg.CORSOrigins, mux), s.cfg.BodyReadTimeout), MaxHeaderBytes)
}

// writeJSON answers a small JSON document.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"`+codeInternal+`","message":"encode response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers {"error": {code, status, name, message, description}}:
// code and message for people and tools, and PowerSync's field names
// (description, name) that the SDKs show in their errors.
func writeError(w http.ResponseWriter, e *apiError) {
	name := "ServiceError"
	switch e.status {
	case http.StatusUnauthorized:
		name = "AuthorizationError"
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusRequestTimeout:
		name = "ValidationError"
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{
		"code": e.code, "status": e.status, "name": name, "message": e.msg, "description": e.msg}})
}

// authenticate runs the auth phase in its own span, from the headers
// before the body is read: a refused client gets its 401 at once, and
// its connection closes whatever is left of its body (closeUnread).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (identity, bool) {
	ctx, span := s.tracer.Start(r.Context(), "syncapi.auth")
	defer span.End()
	id, aerr := s.auth.authenticate(ctx, r.Header.Get("Authorization"))
	if aerr != nil {
		span.SetAttributes(attrCode.String(aerr.code))
		closeUnread(w, r)
		writeError(w, aerr)
		return identity{}, false
	}
	return id, true
}

func (s *Server) handleWriteCheckpoint(w http.ResponseWriter, r *http.Request) {
	id, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	lsn, ok := s.sourcePosition(w, r)
	if !ok {
		return
	}
	clientID := r.URL.Query().Get("client_id")
	n, err := s.store.CreateWriteCheckpoint(ctx, id.userID, clientID, lsn)
	if err != nil {
		s.log.Warn("sync api: create write checkpoint", "user", id.userID, "client_id", clientID, "err", err)
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "cannot store the write checkpoint"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"write_checkpoint": strconv.FormatInt(n, 10)}})
}

// sourcePosition reads the source's WAL position for a write checkpoint,
// answering 503 itself when it cannot.
func (s *Server) sourcePosition(w http.ResponseWriter, r *http.Request) (pglogrepl.LSN, bool) {
	if s.cfg.SourceLSN == nil {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable,
			msg: "write checkpoints are not available: no source database is configured for this API"})
		return 0, false
	}
	lsn, err := s.cfg.SourceLSN(r.Context())
	if err != nil {
		s.log.Warn("sync api: read source LSN for write checkpoint", "err", err)
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable,
			msg: "cannot read the source database position: " + err.Error()})
		return 0, false
	}
	return lsn, true
}

// handleCheckpointRequest serves POST /sync/checkpoint-request
// {client_id, checkpoint_request_id}: a write checkpoint the client
// numbered (checkpoint_mode "requests"), reported in a stream's
// checkpoint once replication has passed the source's position now. The
// answer is the client's write checkpoint, the larger of the stored and
// requested ids — under both names, checkpoint_request_id (what the SDKs
// read) and write_checkpoint (what the PowerSync service's newest code
// sends).
func (s *Server) handleCheckpointRequest(w http.ResponseWriter, r *http.Request) {
	id, ok := s.authenticate(w, r)
	if !ok {
		return
	}
	clientID, requested, aerr := readCheckpointRequest(w, r, s.cfg.MaxRequestBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	lsn, ok := s.sourcePosition(w, r)
	if !ok {
		return
	}
	n, err := s.store.RequestWriteCheckpoint(r.Context(), id.userID, clientID, requested, lsn)
	if err != nil {
		s.log.Warn("sync api: request write checkpoint", "user", id.userID, "client_id", clientID, "err", err)
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "cannot store the write checkpoint"})
		return
	}
	v := strconv.FormatInt(n, 10)
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"checkpoint_request_id": v, "write_checkpoint": v}})
}

// begin registers a stream unless the server is closing.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams.Add(1)
	return true
}

// retryAfter is the Retry-After (seconds) of a refused stream (429, 503
// while shutting down): a few seconds, about the SDKs' own retry delay.
const retryAfter = "5"

func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	id, ok := s.authenticate(w, r) // the token first: see authenticate
	if !ok {
		return
	}
	req, aerr := readSyncRequest(w, r, s.cfg.MaxRequestBytes, s.cfg.BodyReadTimeout)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if !s.begin() {
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "the sync API is shutting down"})
		return
	}
	if n := s.active.Add(1); n > int64(s.cfg.MaxConcurrentConnections) {
		s.active.Add(-1)
		s.streams.Done()
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, &apiError{status: http.StatusTooManyRequests, code: codeTooManyConns,
			msg: fmt.Sprintf("maximum concurrent sync connections (%d, api.max_concurrent_connections) reached; retry in %s s",
				s.cfg.MaxConcurrentConnections, retryAfter)})
		return
	}
	markStreaming(r.Context()) // bounded by the slots above, not the ConnGuard
	lw := newLineWriter(w, r, s.cfg.WriteTimeout)
	raw, ctx, cancel, err := takeOver(w, r)
	switch {
	case err != nil: // the client is gone already; takeOver closed the connection
		s.log.Debug("sync stream not started: client unreachable", "err", err)
		s.release()
		return
	case raw != nil:
		lw.out = raw
		// The stream goes on without net/http's goroutine: its stack, and
		// everything it holds of the request, are freed.
		go s.serveStream(ctx, cancel, newConn(s, id, req, lw), raw)
		return
	}
	lw.answerHTTP(w)
	ctx, cancel = context.WithCancel(r.Context())
	s.serveStream(ctx, cancel, newConn(s, id, req, lw), nil)
}

// serveStream runs a sync stream until it ends, and then closes it:
// raw, when the connection was taken over, is closed.
func (s *Server) serveStream(ctx context.Context, cancel context.CancelFunc, c *conn, raw *rawOut) {
	defer s.openStream(ctx, cancel, c.w, raw)()
	if raw != nil {
		// Off net/http's goroutine, a panic would end the process: report
		// it and close the stream, as net/http does for a handler.
		defer s.recoverStream()
	}
	c.run(ctx)
}

// openStream counts an open stream and has it ended when the server
// closes; the returned function closes it. It is not inlined, nor is
// recoverStream: their frames stay off the stack the stream waits on
// for as long as it is open (see conn.run).
//
//go:noinline
func (s *Server) openStream(ctx context.Context, cancel context.CancelFunc, lw *lineWriter, raw *rawOut) (closeStream func()) {
	transport := attribute.String("transport", lw.transport())
	sentAttrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("content_type", lw.contentType()),
		attribute.String("content_encoding", lw.contentEncoding()), transport))
	connAttrs := metric.WithAttributeSet(attribute.NewSet(transport))
	lw.sent = func(n int64) { s.bytesSent.Add(s.ctx, n, sentAttrs) }
	// Close ends the stream, even one blocked writing to a stalled client.
	stop := context.AfterFunc(s.ctx, func() { cancel(); lw.abort() })
	s.connections.Add(ctx, 1, connAttrs)
	return func() {
		stop()
		cancel()
		lw.finish()
		if raw != nil {
			_ = raw.conn.Close()
		}
		s.connections.Add(context.WithoutCancel(ctx), -1, connAttrs)
		s.release()
	}
}

//go:noinline
func (s *Server) recoverStream() {
	if p := recover(); p != nil && p != http.ErrAbortHandler {
		s.log.Error("sync stream panicked", "panic", p, "stack", string(debug.Stack()))
	}
}

// release gives back a stream's slot and its share of the shutdown wait.
func (s *Server) release() {
	s.active.Add(-1)
	s.streams.Done()
	if s.streamDone != nil {
		s.streamDone()
	}
}

// rulesFor returns the parsed sync rules of a group.
func (s *Server) rulesFor(ctx context.Context, group int) (*syncrules.Rules, error) {
	s.mu.Lock()
	r := s.rules[group]
	s.mu.Unlock()
	if r != nil {
		return r, nil
	}
	g, err := s.groups.Group(ctx, group)
	if err != nil {
		return nil, err
	}
	r, err = syncrules.Parse([]byte(g.Rules), syncrules.Options{GroupID: strconv.Itoa(g.ID)})
	if err != nil {
		return nil, fmt.Errorf("sync rules of group %d: %w", group, err)
	}
	s.mu.Lock()
	s.rules[group] = r
	s.mu.Unlock()
	return r, nil
}
