package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Validate checks the semantics of the whole config offline (it never
// connects to anything; it only checks that a sync rules file is readable)
// and returns an Errors with every problem, or nil. Load calls it; call it
// yourself after building or changing a Config in Go.
func (c *Config) Validate() error {
	v := &validator{c: c}
	v.source()
	v.storage()
	v.syncRules()
	v.replication()
	v.api()
	v.telemetry()
	v.pipelines()
	return v.errs.orNil()
}

// ValidateServe checks what serving the sync API needs beyond Validate:
// the settings that `syncpipe run` (role all or api) refuses at start-up.
// A config without storage (UsesStorage) serves nothing and needs none.
// `syncpipe validate` calls it, so that a file run rejects is rejected
// there too, with its position; other roles do not need these keys.
func (c *Config) ValidateServe() error {
	if !c.UsesStorage() {
		return nil // no bucket storage, nothing to serve: run starts no API
	}
	v := &validator{c: c}
	au := c.API.Auth
	if len(au.Audience) == 0 {
		v.add(KindRequired, "api.auth.audience", "required: at least one accepted audience (tokens must carry aud); `syncpipe run` refuses to serve without one")
	}
	if len(au.HS256Secrets) == 0 && au.JWKSURI == "" && len(au.JWKS.Keys) == 0 {
		v.add(KindRequired, "api.auth", "required: a key to verify tokens with (hs256_secrets, jwks_uri or jwks.keys); `syncpipe run` refuses to serve without one")
	}
	return v.errs.orNil()
}

// Location reports where the key at path (e.g. "api.listen" or
// "pipelines[0].name") was set: a file position, the env variable, or, for a
// key that was not set, the nearest enclosing key that was. Other packages
// use it to point their own config-related errors at the right line.
func (c *Config) Location(path string) Location {
	if c.meta == nil {
		return Location{}
	}
	for p := path; ; p = parentPath(p) {
		if l, ok := c.meta.idx[p]; ok {
			return l
		}
		if p == "" {
			return Location{File: c.meta.file}
		}
	}
}

// ErrorAt wraps err as a positioned Error for the key at path, for checks
// that happen outside this package (for example an unknown sink type).
func (c *Config) ErrorAt(path string, err error) *Error {
	return &Error{Location: c.Location(path), Kind: KindInvalid, Path: path, Msg: err.Error(), Err: err}
}

// CheckSinks reports pipelines whose sink type is not among registered; config
// cannot know the registry, so the program that owns it calls this after
// registering its sinks.
func (c *Config) CheckSinks(registered []string) error {
	var errs Errors
	for i, p := range c.EffectivePipelines() {
		if slices.Contains(registered, p.Sink.Type) {
			continue
		}
		path := fmt.Sprintf("pipelines[%d].sink.type", i)
		if len(c.Pipelines) == 0 {
			path = "pipelines"
		}
		hint := ""
		best := maxTypos(p.Sink.Type) + 1
		for _, r := range registered {
			if d := editDistance(p.Sink.Type, r); d < best {
				hint, best = fmt.Sprintf(" (did you mean %q?)", r), d
			}
		}
		errs = append(errs, &Error{Location: c.Location(path), Kind: KindEnum, Path: path,
			Msg: fmt.Sprintf("unknown sink type %q%s; registered: %s", p.Sink.Type, hint, strings.Join(registered, ", "))})
	}
	return errs.orNil()
}

// validator collects semantic problems, skipping keys the walker already
// rejected (their value was dropped, so further complaints would be noise).
type validator struct {
	c    *Config
	errs Errors
}

func (v *validator) add(kind Kind, path, format string, args ...any) *Error {
	if m := v.c.meta; m != nil {
		for _, t := range m.tainted {
			if within(path, t) {
				return &Error{}
			}
		}
	}
	e := newError(v.c.Location(path), kind, path, format, args...)
	v.errs = append(v.errs, e)
	return e
}

func (v *validator) required(path, val, what string) bool {
	if strings.TrimSpace(val) == "" {
		v.add(KindRequired, path, "required: %s", what)
		return false
	}
	return true
}

func (v *validator) atLeast(path string, got, lo int) {
	if got < lo {
		v.add(KindRange, path, "must be ≥ %d (got %d)", lo, got)
	}
}

func (v *validator) positive(path string, got time.Duration) {
	if got <= 0 {
		v.add(KindRange, path, "must be > 0 (got %s)", fmtDuration(got))
	}
}

func (v *validator) nonNegative(path string, got time.Duration) {
	if got < 0 {
		v.add(KindRange, path, "must be ≥ 0 (got %s)", fmtDuration(got))
	}
}

func (v *validator) minBytes(path string, got, lo ByteSize) {
	if got < lo {
		v.add(KindRange, path, "must be ≥ %s (got %s)", lo, got)
	}
}

func (v *validator) enum(path, got string, allowed ...string) {
	if !slices.Contains(allowed, got) {
		v.add(KindEnum, path, "must be one of %s (got %q)", strings.Join(allowed, ", "), got)
	}
}

var (
	identRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
	slotRE      = regexp.MustCompile(`^[a-z0-9_]{0,40}$`)
	nameRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	sinkTypeRE  = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)
	tableNameRE = regexp.MustCompile(`^[^.\s]+(\.[^.\s]+)?$`)
)

func (v *validator) match(path, got string, re *regexp.Regexp, want string) {
	if !re.MatchString(got) {
		v.add(KindInvalid, path, "%q is not %s", got, want)
	}
}

func (v *validator) source() {
	s := v.c.Source
	if v.required("source.uri", s.URI, "the postgres:// URI of the database to replicate") {
		v.pgURI("source.uri", s.URI)
	}
	v.match("source.publication", s.Publication, identRE, "a valid publication name (letters, digits, _, at most 63)")
	v.match("source.slot_prefix", s.SlotPrefix, slotRE, "a valid slot prefix (lowercase letters, digits, _, at most 40)")
	v.positive("source.connect_timeout", s.ConnectTimeout)
	v.nonNegative("source.snapshot_socket_timeout", s.SnapshotSocketTimeout)
	v.nonNegative("source.heartbeat_interval", s.HeartbeatInterval)
}

func (v *validator) storage() {
	s := v.c.Storage
	if !v.c.UsesStorage() {
		// Only custom pipelines: their state goes to state files.
		v.required("state_dir", v.c.StateDir, "the directory of the pipelines' state files (without a storage section, and with no pipeline writing to bucketstore, pipelines keep their state there)")
		return
	}
	if v.c.StateDir != "" {
		v.add(KindConflict, "state_dir", "set either a storage section or state_dir, not both: with storage, the pipelines' state is kept in storage")
	}
	if v.required("storage.uri", s.URI, "the postgres:// URI of bucket storage") {
		v.pgURI("storage.uri", s.URI)
	}
	v.match("storage.schema", s.Schema, identRE, "a valid schema name (letters, digits, _, at most 63)")
	v.atLeast("storage.max_conns", s.MaxConns, 1)
	v.enum("storage.synchronous_commit", s.SynchronousCommit, "off", "on")
	v.positive("storage.connect_timeout", s.ConnectTimeout)
}

func (v *validator) syncRules() {
	r := v.c.SyncRules
	switch {
	case r.Path != "" && r.Content != "":
		v.add(KindConflict, "sync_rules", "set either path or content, not both")
	case r.Path == "" && strings.TrimSpace(r.Content) == "":
		v.add(KindRequired, "sync_rules", "required: set path (a rules file) or content (inline rules YAML)")
	case r.Path != "":
		f, err := os.Open(r.Path)
		if err == nil {
			var st fs.FileInfo
			if st, err = f.Stat(); err == nil && st.IsDir() {
				err = fmt.Errorf("%s is a directory", r.Path)
			}
			f.Close()
		}
		if err != nil {
			msg := fmt.Sprintf("cannot read sync rules file %s", r.Path)
			if errors.Is(err, fs.ErrNotExist) {
				msg = fmt.Sprintf("sync rules file %s does not exist", r.Path)
			}
			e := v.add(KindFile, "sync_rules.path", "%s", msg)
			e.Err = err
		}
	}
}

func (v *validator) replication() {
	r := v.c.Replication
	v.atLeast("replication.workers_per_process", r.WorkersPerProcess, 1)
	s := r.Snapshot
	v.atLeast("replication.snapshot.chunk_rows", s.ChunkRows, 1)
	v.atLeast("replication.snapshot.split_rows", s.SplitRows, 0)
	v.atLeast("replication.snapshot.max_ranges_per_table", s.MaxRangesPerTable, 1)
	v.atLeast("replication.snapshot.flush_writers", s.FlushWriters, 1)
	v.atLeast("replication.snapshot.eval_workers", s.EvalWorkers, 0)
	st := r.Stream
	v.atLeast("replication.stream.batch_max_rows", st.BatchMaxRows, 1)
	v.minBytes("replication.stream.batch_max_bytes", st.BatchMaxBytes, KiB)
	v.nonNegative("replication.stream.batch_max_wait", st.BatchMaxWait)
	v.positive("replication.stream.receive_timeout", st.ReceiveTimeout)
	v.positive("replication.stream.status_interval", st.StatusInterval)
	v.nonNegative("replication.stream.schema_check_interval", st.SchemaCheckInterval)
	v.nonNegative("replication.stream.idle_commit_interval", st.IdleCommitInterval)
	if st.StatusInterval > 0 && st.ReceiveTimeout > 0 && st.StatusInterval >= st.ReceiveTimeout {
		v.add(KindRange, "replication.stream.status_interval", "must be below replication.stream.receive_timeout = %s (got %s)",
			fmtDuration(st.ReceiveTimeout), fmtDuration(st.StatusInterval))
	}
	l := r.Lease
	v.positive("replication.lease.duration", l.Duration)
	v.positive("replication.lease.heartbeat", l.Heartbeat)
	if l.Heartbeat > 0 && l.Duration > 0 && l.Heartbeat >= l.Duration {
		v.add(KindRange, "replication.lease.heartbeat", "must be below replication.lease.duration = %s, so leases are renewed in time (got %s)",
			fmtDuration(l.Duration), fmtDuration(l.Heartbeat))
	}
	v.positive("replication.storage_timeout", r.StorageTimeout)
	v.nonNegative("replication.compaction.interval", r.Compaction.Interval)
	v.atLeast("replication.compaction.batch_ops", r.Compaction.BatchOps, 1)
	if mb := r.Compaction.MaxBusy; !(mb > 0 && mb <= 1) {
		v.add(KindRange, "replication.compaction.max_busy", "must be above 0 and at most 1 (got %g)", mb)
	}
}

func (v *validator) api() {
	a := v.c.API
	if v.required("api.listen", a.Listen, "the host:port of the sync API") {
		v.listen("api.listen", a.Listen)
	}
	au := a.Auth
	v.nonEmptyItems("api.auth.audience", au.Audience)
	v.nonEmptyItems("api.auth.hs256_secrets", au.HS256Secrets)
	v.hs256Secrets(au.HS256Secrets)
	if au.JWKSURI != "" {
		v.httpURL("api.auth.jwks_uri", au.JWKSURI)
	}
	for i, k := range au.JWKS.Keys {
		if kty, _ := k["kty"].(string); kty == "" {
			v.add(KindRequired, fmt.Sprintf("api.auth.jwks.keys[%d]", i), "required: kty (key type, e.g. RSA or EC)")
		}
	}
	v.positive("api.auth.max_lifetime", au.MaxLifetime)
	v.atLeast("api.max_buckets_per_connection", a.MaxBucketsPerConnection, 1)
	v.atLeast("api.max_parameter_query_results", a.MaxParameterQueryResults, 1)
	v.atLeast("api.max_concurrent_connections", a.MaxConcurrentConnections, 1)
	v.atLeast("api.max_data_fetch_concurrency", a.MaxDataFetchConcurrency, 1)
	v.atLeast("api.checksum_cache_size", a.ChecksumCacheSize, 1)
	v.minBytes("api.max_request_bytes", a.MaxRequestBytes, KiB)
	v.nonNegative("api.shutdown_timeout", a.ShutdownTimeout)
	for i, o := range a.CORSOrigins {
		if o != "*" {
			v.httpURL(fmt.Sprintf("api.cors_origins[%d]", i), o)
		}
	}
}

// MinHS256SecretBytes is the shortest HS256 secret accepted: 256 bits, the
// HMAC-SHA256 key size (RFC 7518 §3.2). A shorter secret can be guessed
// offline from any one token it signed.
const MinHS256SecretBytes = 32

// hs256Secrets refuses secrets shorter than MinHS256SecretBytes (empty
// ones are nonEmptyItems' error). The message gives the length, never the
// secret.
func (v *validator) hs256Secrets(secrets []string) {
	for i, s := range secrets {
		if n := len(s); n > 0 && strings.TrimSpace(s) != "" && n < MinHS256SecretBytes {
			v.add(KindRange, fmt.Sprintf("api.auth.hs256_secrets[%d]", i),
				"must be at least %d bytes (got %d): a shorter secret can be guessed offline from any token it signed; "+
					"generate one with e.g. `openssl rand -hex 32`", MinHS256SecretBytes, n)
		}
	}
}

func (v *validator) telemetry() {
	t := v.c.Telemetry
	if t.MetricsListen != "" {
		v.listen("telemetry.metrics_listen", t.MetricsListen)
	}
	tr := t.Tracing
	v.enum("telemetry.tracing.exporter", tr.Exporter, "none", "stdout", "otlp")
	if tr.OTLPEndpoint != "" {
		v.httpURL("telemetry.tracing.otlp_endpoint", tr.OTLPEndpoint)
	}
	if !(tr.SampleRatio >= 0 && tr.SampleRatio <= 1) {
		v.add(KindRange, "telemetry.tracing.sample_ratio", "must be between 0 and 1 (got %g)", tr.SampleRatio)
	}
	v.required("telemetry.tracing.service_name", tr.ServiceName, "a service name")
	v.enum("log.level", v.c.Log.Level, "debug", "info", "warn", "error")
	v.enum("log.format", v.c.Log.Format, "auto", "text", "json")
}

func (v *validator) pipelines() {
	first := make(map[string]int)
	for i, p := range v.c.Pipelines {
		at := fmt.Sprintf("pipelines[%d]", i)
		if v.required(at+".name", p.Name, "a unique pipeline name") {
			v.match(at+".name", p.Name, nameRE, "a valid pipeline name (letters, digits, _ . -, at most 63)")
			if j, dup := first[p.Name]; dup {
				prev := fmt.Sprintf("pipelines[%d].name", j)
				v.add(KindDuplicate, at+".name", "duplicate pipeline name %q (first used by %s at %s)", p.Name, prev, v.c.Location(prev))
			} else {
				first[p.Name] = i
			}
		}
		if p.Source.URI != "" {
			v.pgURI(at+".source.uri", p.Source.URI)
		}
		if p.Source.Publication != "" {
			v.match(at+".source.publication", p.Source.Publication, identRE, "a valid publication name")
		}
		if p.Source.SlotPrefix != "" {
			v.match(at+".source.slot_prefix", p.Source.SlotPrefix, slotRE, "a valid slot prefix")
		}
		seen := make(map[string]bool)
		for j, t := range p.Tables {
			tp := fmt.Sprintf("%s.tables[%d]", at, j)
			v.match(tp, t, tableNameRE, "a table name (table or schema.table)")
			if seen[t] {
				v.add(KindDuplicate, tp, "table %q listed twice", t)
			}
			seen[t] = true
		}
		st := p.Stages
		for key, n := range map[string]int{"chunk_rows": st.ChunkRows, "decode_workers": st.DecodeWorkers,
			"eval_workers": st.EvalWorkers, "flush_writers": st.FlushWriters, "channel_depth": st.ChannelDepth,
			"batch_max_rows": st.BatchMaxRows, "batch_max_bytes": int(st.BatchMaxBytes)} {
			v.atLeast(at+".stages."+key, n, 0)
		}
		if p.Sink.Type != "" {
			v.match(at+".sink.type", p.Sink.Type, sinkTypeRE, "a sink type name (lowercase letters, digits, _ . -)")
		}
		if p.Sink.Type == "" || p.Sink.Type == SinkBucketstore {
			if j, dup := first[" bucketstore"]; dup {
				v.add(KindDuplicate, at+".sink.type", "a second pipeline writing to bucket storage (the first is pipelines[%d]): bucket storage holds one set of sync rules; give the others another sink", j)
			} else {
				first[" bucketstore"] = i
			}
		}
	}
}
