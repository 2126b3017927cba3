package config

import (
	"time"
)

// The `doc` tag on every field is its user-facing documentation: Reference()
// renders it into the README's config table, so it is written for operators.
// The `default` tag is used only where the effective default is not the zero
// value stored in the struct (pipeline fields that inherit from sections).

// Config is the whole syncpipe configuration. Obtain one from Load (which
// validates) or from Default (then fill it in and call Validate).
type Config struct {
	Source      Source      `koanf:"source" doc:"The PostgreSQL database to replicate."`
	Storage     Storage     `koanf:"storage" doc:"The PostgreSQL database holding bucket storage. Required when a pipeline writes to bucketstore (as the default pipeline does); without it, pipelines keep their state in state_dir."`
	StateDir    string      `koanf:"state_dir" doc:"Directory of the state files of pipelines whose sink is not bucketstore ({state_dir}/{pipeline name}.state.json: version, slot, snapshot plan, stream position, last error) when there is no storage section; required then, and refused with one (the state is then kept in storage). Put it next to the sinks' progress files. Relative paths are resolved against the config file's directory."`
	SyncRules   SyncRules   `koanf:"sync_rules" doc:"The sync rules: PowerSync edition 1 bucket_definitions, or edition 3 streams (Sync Streams, in part)."`
	Replication Replication `koanf:"replication" doc:"Replication workers, snapshot and stream tuning."`
	API         API         `koanf:"api" doc:"The sync API server."`
	Telemetry   Telemetry   `koanf:"telemetry" doc:"Metrics and tracing."`
	Log         Log         `koanf:"log" doc:"Structured logging."`
	Pipelines   []Pipeline  `koanf:"pipelines" doc:"Pipelines to run; empty means one bucketstore pipeline named \"default\" over every table the sync rules use."`

	meta *meta // where each key came from; nil for configs built in Go
}

// Source describes the replicated database.
type Source struct {
	URI                   string        `koanf:"uri" doc:"Required. postgres:// or postgresql:// URI; the password may be omitted (libpq rules: PGPASSWORD, ~/.pgpass)."`
	Publication           string        `koanf:"publication" doc:"Logical replication publication to stream from. Created FOR TABLE the rules' tables when missing; tables later rules name are added to a publication syncpipe created (one created by someone else is only checked)."`
	SlotPrefix            string        `koanf:"slot_prefix" doc:"Prefix of the replication slot names syncpipe creates (lowercase letters, digits, _)."`
	ConnectTimeout        time.Duration `koanf:"connect_timeout" doc:"Timeout for establishing a source connection."`
	SnapshotSocketTimeout time.Duration `koanf:"snapshot_socket_timeout" doc:"Longest wait for data on a snapshot read before the connection is considered dead; 0 = none."`
	HeartbeatInterval     time.Duration `koanf:"heartbeat_interval" doc:"Interval of pg_logical_emit_message heartbeats that keep idle slots advancing; 0 = off."`
}

// Storage describes the bucket storage database.
type Storage struct {
	URI               string        `koanf:"uri" doc:"Required when a pipeline writes to bucketstore (the default pipeline does). postgres:// or postgresql:// URI of bucket storage; migrated on start."`
	Schema            string        `koanf:"schema" doc:"Schema that holds syncpipe's tables."`
	MaxConns          int           `koanf:"max_conns" doc:"Maximum connections in the storage pool."`
	SynchronousCommit string        `koanf:"synchronous_commit" doc:"synchronous_commit for storage writes: off or on. off is safe: published checkpoints, acknowledged LSNs and done marks come from durable records, and work resumes from storage after a storage restart."`
	ConnectTimeout    time.Duration `koanf:"connect_timeout" doc:"Timeout for establishing a storage connection."`
}

// SyncRules locates the sync rules; exactly one of Path and Content is set.
type SyncRules struct {
	Path    string `koanf:"path" doc:"Sync rules file; relative paths are resolved against the config file's directory. Exclusive with content."`
	Content string `koanf:"content" doc:"Inline sync rules YAML (use a block scalar: content: |). Exclusive with path."`
}

// Replication tunes the replication workers.
type Replication struct {
	WorkersPerProcess int           `koanf:"workers_per_process" doc:"Work units (table snapshots, streams) one process runs at a time."`
	Snapshot          Snapshot      `koanf:"snapshot" doc:"Initial snapshot tuning."`
	Stream            Stream        `koanf:"stream" doc:"Logical replication stream tuning."`
	Lease             Lease         `koanf:"lease" doc:"Work unit leases shared between processes."`
	Compaction        Compaction    `koanf:"compaction" doc:"Background compaction of bucket storage (as syncpipe compact does)."`
	StorageTimeout    time.Duration `koanf:"storage_timeout" doc:"Longest a single storage write or commit may take before the work unit fails and is retried."`
}

// Compaction schedules background compaction: one replication process at
// a time (a lease) compacts every serving group.
type Compaction struct {
	Interval time.Duration `koanf:"interval" doc:"Time between background compactions of every serving group (superseded ops to MOVE, leading runs to CLEAR; checksums unchanged); 0 turns it off."`
	BatchOps int           `koanf:"batch_ops" doc:"Ops one compaction transaction reads or rewrites: the bound on what it holds locked."`
	MaxBusy  float64       `koanf:"max_busy" doc:"Share of the time compaction works, above 0 up to 1: between transactions it pauses so that it is busy at most this share, leaving storage's CPU to replication and reads (1: full speed; syncpipe compact --max-busy overrides it)."`
}

// Snapshot tunes the chunked, parallel initial copy.
type Snapshot struct {
	ChunkRows         int `koanf:"chunk_rows" doc:"Rows read per key-ordered chunk; progress is committed per chunk."`
	SplitRows         int `koanf:"split_rows" doc:"Tables with more (estimated) rows are split into key ranges read in parallel; 0 = never split."`
	MaxRangesPerTable int `koanf:"max_ranges_per_table" doc:"Upper bound on parallel key ranges per table."`
	FlushWriters      int `koanf:"flush_writers" doc:"Concurrent storage writers per snapshot."`
	EvalWorkers       int `koanf:"eval_workers" doc:"Goroutines evaluating sync rules on snapshot rows per snapshot unit; 0 = GOMAXPROCS / workers_per_process (at least 1)."`
}

// Stream tunes the logical replication stream.
type Stream struct {
	BatchMaxRows   int           `koanf:"batch_max_rows" doc:"Flush a storage batch after this many source rows (several transactions may share one batch)."`
	BatchMaxBytes  ByteSize      `koanf:"batch_max_bytes" doc:"Flush a storage batch after this much row data (integer bytes or e.g. 16MiB)."`
	BatchMaxWait   time.Duration `koanf:"batch_max_wait" doc:"How long a batch keeps collecting transactions before it is written; 0: none, a batch is written as soon as no more changes are waiting, so batches grow only while the previous one is being written (the lowest latency)."`
	ReceiveTimeout time.Duration `koanf:"receive_timeout" doc:"Reconnect when the source sends nothing (not even keepalives) for this long."`
	StatusInterval time.Duration `koanf:"status_interval" doc:"Interval of standby status updates to the source; must be below receive_timeout."`
	// SchemaCheckInterval exists because a DDL is invisible in the stream
	// until a row of its table changes.
	SchemaCheckInterval time.Duration `koanf:"schema_check_interval" doc:"How often the source catalog is compared with the stored table shapes and the publication, so a DDL on a table no row of which changed since is re-snapshotted too; 0 = only when the stream shows a new shape."`
	// IdleCommitInterval exists because with source and storage in one
	// cluster every stored position writes the WAL that moves the slot's
	// position again (see replication/doc.go, "Idle positions").
	IdleCommitInterval time.Duration `koanf:"idle_commit_interval" doc:"How often a stream position that carries no change (a keepalive, an empty transaction, changes of tables the rules do not use) is recorded in storage and then confirmed to the source; a write checkpoint or a heartbeat that waits for the position, and any change, records it at once. 0 = every position at once."`
}

// Lease configures how processes share work units through storage.
type Lease struct {
	Duration  time.Duration `koanf:"duration" doc:"A dead process's work units are taken over after this long."`
	Heartbeat time.Duration `koanf:"heartbeat" doc:"Lease renewal interval; must be below duration."`
}

// API configures the sync API server.
type API struct {
	Listen                   string        `koanf:"listen" doc:"host:port the sync API listens on (\":8080\" = all interfaces)."`
	Auth                     Auth          `koanf:"auth" doc:"Client JWT verification."`
	MaxBucketsPerConnection  int           `koanf:"max_buckets_per_connection" doc:"A client entitled to more buckets gets a clear error instead of a partial sync."`
	MaxParameterQueryResults int           `koanf:"max_parameter_query_results" doc:"A client whose parameter queries (subqueries of streams) match more stored rows gets a clear error instead of a partial sync (PowerSync's limit of the same name)."`
	MaxConcurrentConnections int           `koanf:"max_concurrent_connections" doc:"Concurrent sync streams; more are refused with 429 and Retry-After: 5."`
	MaxDataFetchConcurrency  int           `koanf:"max_data_fetch_concurrency" doc:"Concurrent bucket data queries against storage, across all connections."`
	ChecksumCacheSize        int           `koanf:"checksum_cache_size" doc:"Entries in the (bucket, checkpoint) checksum LRU cache."`
	MaxRequestBytes          ByteSize      `koanf:"max_request_bytes" doc:"Largest accepted request body (integer bytes or e.g. 1MiB)."`
	ShutdownTimeout          time.Duration `koanf:"shutdown_timeout" doc:"Grace period for open streams on shutdown before they are closed."`
	CORSOrigins              []string      `koanf:"cors_origins" doc:"Origins allowed for browser clients (\"*\" = any, the default, as the PowerSync service does); an empty list = no CORS headers."`
}

// Auth configures JWT verification for sync clients.
type Auth struct {
	Audience     []string      `koanf:"audience" doc:"Accepted aud values; a token must carry one of them."`
	HS256Secrets []string      `koanf:"hs256_secrets" doc:"Shared secrets for kid-less HS256 tokens, each at least 32 bytes (shorter is a config error; generate one with e.g. openssl rand -hex 32). A token with a kid header verifies only with the key of that kid (jwks_uri, jwks.keys), never with these: an unknown kid is refused (401 PSYNC_S2101)."`
	JWKSURI      string        `koanf:"jwks_uri" doc:"http(s) URL of a JWKS (RS256/ES256 keys, matched by kid); empty = none."`
	JWKS         JWKS          `koanf:"jwks" doc:"Inline JWKS, used together with jwks_uri and hs256_secrets."`
	MaxLifetime  time.Duration `koanf:"max_lifetime" doc:"Tokens whose exp - iat exceeds this are rejected."`
}

// JWKS is an inline JSON Web Key Set. Keys stay free-form maps so that the
// API package, not config, owns JOSE parsing.
type JWKS struct {
	Keys []map[string]any `koanf:"keys" doc:"JSON Web Keys (each needs kty)."`
}

// Telemetry configures metrics and tracing.
type Telemetry struct {
	MetricsListen string  `koanf:"metrics_listen" doc:"host:port serving Prometheus /metrics; empty = off (metrics stay on the API's /metrics)."`
	Tracing       Tracing `koanf:"tracing" doc:"OpenTelemetry tracing."`
}

// Tracing configures the OpenTelemetry exporter.
type Tracing struct {
	Exporter     string  `koanf:"exporter" doc:"none, stdout or otlp."`
	OTLPEndpoint string  `koanf:"otlp_endpoint" doc:"OTLP/HTTP endpoint; empty = the OTEL_EXPORTER_OTLP_* environment."`
	SampleRatio  float64 `koanf:"sample_ratio" doc:"Fraction of root spans sampled, 0 to 1."`
	ServiceName  string  `koanf:"service_name" doc:"service.name resource attribute."`
}

// Log configures slog output.
type Log struct {
	Level  string `koanf:"level" doc:"debug, info, warn or error."`
	Format string `koanf:"format" doc:"auto, text or json; auto = text on a terminal, JSON otherwise."`
}

// Default returns a Config holding every default; Load decodes the file on
// top of it, so a key absent from the file keeps the value set here.
func Default() *Config {
	return &Config{
		Source: Source{
			Publication:           "syncpipe",
			SlotPrefix:            "syncpipe_",
			ConnectTimeout:        10 * time.Second,
			SnapshotSocketTimeout: 5 * time.Minute,
			HeartbeatInterval:     30 * time.Second,
		},
		Storage: Storage{
			Schema:            "syncpipe",
			MaxConns:          8,
			SynchronousCommit: "off",
			ConnectTimeout:    10 * time.Second,
		},
		Replication: Replication{
			WorkersPerProcess: 2,
			Snapshot: Snapshot{
				ChunkRows:         10000,
				SplitRows:         250000,
				MaxRangesPerTable: 8,
				FlushWriters:      2,
			},
			Stream: Stream{
				BatchMaxRows:   10000,
				BatchMaxBytes:  16 * MiB,
				BatchMaxWait:   0,
				ReceiveTimeout: 30 * time.Second,
				StatusInterval: 10 * time.Second,

				SchemaCheckInterval: 10 * time.Second,
				IdleCommitInterval:  5 * time.Second,
			},
			Lease:          Lease{Duration: 30 * time.Second, Heartbeat: 10 * time.Second},
			Compaction:     Compaction{Interval: time.Hour, BatchOps: 10000, MaxBusy: 0.2},
			StorageTimeout: 5 * time.Minute,
		},
		API: API{
			Listen:                   "127.0.0.1:8080",
			Auth:                     Auth{MaxLifetime: 24 * time.Hour},
			MaxBucketsPerConnection:  1000,
			MaxParameterQueryResults: 1000,
			MaxConcurrentConnections: 200,
			MaxDataFetchConcurrency:  10,
			ChecksumCacheSize:        100000,
			MaxRequestBytes:          1 * MiB,
			ShutdownTimeout:          30 * time.Second,
			CORSOrigins:              []string{"*"},
		},
		Telemetry: Telemetry{
			MetricsListen: "127.0.0.1:9464",
			Tracing:       Tracing{Exporter: "none", SampleRatio: 1.0, ServiceName: "syncpipe"},
		},
		Log: Log{Level: "info", Format: "auto"},
	}
}
