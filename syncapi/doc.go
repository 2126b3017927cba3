// Package syncapi serves bucket storage to unmodified PowerSync client SDKs
// over their HTTP streaming protocol (SPEC §6), and over WebSocket
// (RSocket) as the SDKs' connectionMethod 'web-socket' expects.
//
// # Endpoints
//
//   - POST /sync/stream: the sync stream, NDJSON (application/x-ndjson),
//     gzip-compressed when the client accepts it, flushed line by line.
//   - GET /sync/stream with Upgrade: websocket: the same stream as an
//     RSocket connection (websocket.go; the protocol in rsocket/doc.go):
//     the token in the SETUP, the request in the REQUEST_STREAM, each line
//     a BSON PAYLOAD sent against the client's REQUEST_N credit.
//   - GET /write-checkpoint2.json?client_id=…: records a write checkpoint
//     at the source's current WAL position; the stream reports it once
//     replication has passed that position.
//   - POST /sync/checkpoint-request {client_id, checkpoint_request_id}:
//     the same for a write checkpoint the client numbered itself (the
//     SDKs' checkpoint_mode "requests"); answers the larger of the stored
//     and requested ids.
//   - GET /healthz: storage's view of this deployment's health (see
//     Health below). No auth.
//
// Every endpoint but /healthz needs "Authorization: Token <JWT>" (or
// Bearer): HS256 secrets, or RS256/ES256 keys from an inline JWKS or a
// jwks_uri (chosen by kid; the URI is refetched when a kid is unknown; a
// token whose kid no key has is refused, never tried with the kid-less
// keys), with sub, iat, exp and aud required, aud
// matching a configured audience, exp - iat within max_lifetime and 60 s
// of clock skew; a token with a crit header is refused (no JWS extension
// is implemented). Failures are 401 with {"error":{"code","message",…}}
// and no data.
//
// # Cost per connection
//
// The token is checked from the headers before the body is read: a
// refused client gets its 401 at once and its connection is closed,
// whatever is left of its body. A body must arrive within
// BodyReadTimeout (10 s) of the request's start, else 408 and the
// connection closes. A stream refused for max_concurrent_connections
// gets 429 with Retry-After (as does one refused while shutting down,
// 503). Connections that are not streams — being accepted, sending a
// request, idle — are bounded by a ConnGuard on the HTTP server, which
// closes the oldest of them beyond its bound (syncpipe sizes it from the
// file descriptor limit), so stalled clients cannot use up the process's
// file descriptors and /healthz and new streams still get in.
//
// # A stream
//
// One goroutine per stream, driven by the process's single checkpoint
// watcher (no polling). For every new storage checkpoint the stream
// evaluates the client's buckets (static ones from the request, the
// others through parameter lookups at that checkpoint — re-read only when
// storage's change records show that one of the client's lookups got an
// entry since the last checkpoint it evaluated) and their checksums
// (through the process-wide ChecksumCache, which carries buckets the
// change records do not name to the new checkpoint without a query, so a
// checkpoint costs one change record query plus at most one checksum
// query per changed bucket, however many clients share it), then:
//
//   - the first time, sends {"checkpoint":…} with every bucket (signed
//     int32 checksums; empty buckets 0/0);
//   - later, sends {"checkpoint_diff":…} with the new or changed buckets
//     and the removed ones, or nothing if nothing changed for the client;
//   - sends the ops the client lacks for the announced buckets, priority 0
//     first, as {"data":…} lines of one bucket each (≤ 1000 ops, ≈ ≤ 1 MB;
//     op ids as decimal strings, op checksums unsigned, row data as a JSON
//     string when the client asks for raw_data), with
//     {"partial_checkpoint_complete":…} after each priority but the last;
//   - ends with {"checkpoint_complete":…}.
//
// After each data line the stream looks for a newer checkpoint; if there
// is one it abandons the current checkpoint and moves on, keeping what
// was sent, so no op is sent twice. Ops are encoded straight into the
// output buffer while the storage read runs, and the read's connection
// is released before the client is written to, so a slow client holds
// neither a storage connection nor a data fetch slot
// (max_data_fetch_concurrency bounds those across all streams).
//
// What every stream does at a checkpoint is shared across streams: the
// write checkpoints of all open streams are read in one query per
// checkpoint (writecp.go), and streams that completed the previous
// checkpoint and now read the same buckets from the same positions share
// one storage read and its encoded lines (sharedread.go). So an
// incremental checkpoint that changes a bucket every client has costs a
// handful of queries, not a few per client.
//
// {"token_expires_in":n} goes out every KeepaliveInterval; the stream
// ends when the token expires. A client entitled to more than
// max_buckets_per_connection buckets, or whose parameter lookups match
// more than max_parameter_query_results stored rows, gets an error line (PSYNC_S2305, "Too many
// buckets: n (limit of m)…" or "Too many parameter query results…") at
// whichever checkpoint goes over, and the stream ends. With Sync Streams
// the count is over all the connection's subscriptions and default
// streams: no subscription is dropped with the error in streams[].errors
// (which holds the subscriptions that could not be evaluated), since
// PowerSync fails the connection too. Beyond max_concurrent_connections
// streams, new ones get 429 (Retry-After: 5).
//
// # Health
//
// GET /healthz answers from one storage read of the groups, reused for a
// second (healthTTL) by every probe and scrape and bounded by 5 s:
//
//   - 200 {"ok":true,"status":"ok"}: storage answers and no serving group
//     has a stored replication error;
//   - 200 {"ok":true,"status":"degraded","reasons":[{"group":2,
//     "state":"ACTIVE","error":"…","since":"2025-01-02T03:04:05Z"}]}: an
//     ACTIVE or PROCESSING group has an error that the replication side
//     stored because it needs an operator — retrying will not heal it,
//     or it has persisted for minutes (bucketstore Catalog.ReportError;
//     cleared when the group recovers). STOP groups are being retired and
//     do not count;
//   - 503 {"ok":false,"status":"unavailable","error":"storage unreachable: …"}.
//
// Degraded is deliberately 200: under Kubernetes a failing liveness probe
// restarts the pod, which cannot heal an error that retrying does not
// heal, and a failing readiness probe would take every API pod out of the
// Service at once (they share storage), so clients would lose the data
// storage still serves. Alert on the syncpipe_replication_group_errors
// gauge or on "status":"degraded" instead. Unreachable storage is 503:
// the process can serve nothing, and readiness should route around it.
//
// # Shutdown
//
// Shutdown(ctx) refuses new streams with 503 at once and lets open ones
// go on (they keep receiving checkpoints) until they end or ctx does;
// then it closes the rest as Close does. syncpipe run stops the HTTP
// listener first and gives streams api.shutdown_timeout.
//
// # Telemetry
//
// Metrics syncpipe_concurrent_connections (up/down counter),
// syncpipe_operations_synced (counter; _total in Prometheus) and
// syncpipe_replication_group_errors (gauge: serving groups with a stored
// replication error, from the /healthz read; no value while storage is
// unreachable); spans syncapi.auth, syncapi.checkpoint and
// syncapi.data_batch (one per storage read, never per op).
package syncapi
