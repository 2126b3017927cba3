// Package rsocket is the RSocket 1.0 frame layer of the sync API's
// WebSocket transport (issue 43): Parse reads the frame in one WebSocket
// binary message, the Append functions write one. It knows frames, not
// connections: the order of frames, stream state, flow control and
// keepalive timing are the transport's.
//
// # Protocol
//
// What PowerSync's clients and service do over WebSocket, in our words.
// Sources: powersync-ja/powersync-service at 332d649 (S), packages
// rsocket-router/src/router/ReactiveSocketRouter.ts, .../transport/
// WebsocketDuplexConnection.ts, service-core/src/routes/configure-rsocket.ts,
// router-socket.ts, endpoints/socket-route.ts, sync/util.ts,
// service-errors/src/errors.ts; powersync-ja/powersync-js at a875d48 (J),
// packages/shared-internals/src/client/sync/stream/WebSocketSupport.ts and
// AbstractRemote.ts; rsocket/rsocket-js 1.0.x-alpha at b559817 (R: both
// sides use npm rsocket-core 1.0.0-alpha.3), packages/rsocket-core/src/
// Codecs.ts, Frames.ts, RSocketServer.ts, RSocketConnector.ts,
// RSocketSupport.ts, RequestStreamStream.ts, Fragmenter.ts, and
// rsocket-websocket-client/src/WebsocketDuplexConnection.ts; the RSocket
// 1.0 specification, https://rsocket.io/about/protocol (P).
//
//   - Framing: one RSocket frame per WebSocket binary message, without
//     the 24-bit frame length prefix, which is only for transports that do
//     not keep message boundaries (P "Framing Protocol Usage"; R: the
//     WebSocket connections of both sides serialize and deserialize bare
//     frames). The client opens ws(s)://<endpoint>/sync/stream, the HTTP
//     route's URL with its scheme swapped (J AbstractRemote).
//   - Header: stream id (32 bits, top bit reserved), frame type (6 bits),
//     flags (10 bits: IGNORE 0x200, METADATA 0x100, then per type), big
//     endian. Metadata, when flagged, is a 24-bit length and its bytes;
//     the data is the rest of the frame (P; R Codecs).
//   - SETUP, the client's first frame (J WebSocketSupport): version 1.0;
//     keepalive interval 20000 ms; max lifetime 90000 ms; metadata and
//     data MIME types both application/json; metadata the JSON
//     {"token": "Token <jwt>", "user_agent": "powersync-js/<version>"}
//     (the token as in the HTTP Authorization header); no data; no resume
//     token, no lease flag. The service decodes the metadata as JSON or
//     BSON by its MIME type and refuses other types; a missing token is
//     PSYNC_S2106 (S configure-rsocket, router-socket).
//   - Accepting the SETUP: RSocket has no answer to a SETUP; a refusal
//     is an ERROR on stream 0 with REJECTED_SETUP (0x003) and the
//     connection closes. The service refuses there a bad token and, when
//     the connection count is over max_concurrent_connections, 429
//     PSYNC_S2304 (S ReactiveSocketRouter; R RSocketServer turns whatever
//     the acceptor throws into REJECTED_SETUP with its message). The
//     client connects as soon as it has sent its SETUP and learns of a
//     refusal when its stream fails with that error.
//   - REQUEST_STREAM, stream 1: initial request n 10 (the default,
//     buffered fetch strategy) or 1; metadata JSON {"path":"/sync/stream"}
//     (the service routes on it: another path is an error); data the sync
//     request, the same JSON object as the HTTP body (J; S socket-route
//     validates it as the HTTP route does). Only REQUEST_STREAM is served.
//   - Lines: each sync line is one BSON document, the data of one PAYLOAD
//     with NEXT (0x20), whatever the data MIME type; no metadata. Empty
//     (null) lines are skipped and use no credit. The stream's end is a
//     PAYLOAD with COMPLETE (0x40) alone (S socket-route syncLineToBson,
//     responder.onNext / onComplete; R RequestStreamStream).
//   - Flow control: the service adds each REQUEST_N's n to the client's
//     credit, spends one per PAYLOAD, and waits for a REQUEST_N (or
//     cancellation) at 0 (S socket-route). The client keeps at most 10
//     lines requested: after each line it asks for what it consumed,
//     typically REQUEST_N n=1, and stops asking while 10 lines wait in its
//     queue, until 5 do (J). REQUEST_N's n is 31 bits, > 0 (P).
//   - CANCEL on the stream aborts it (S socket-route); the client closes
//     the RSocket and the WebSocket when it disconnects (J abortRequest).
//   - KEEPALIVE (stream 0): the client sends one every 20 s with RESPOND
//     (0x80), last received position 0, no data; the answer is a KEEPALIVE
//     without RESPOND carrying the same data (R RSocketSupport
//     KeepAliveHandler). The service sends none of its own (R
//     RSocketServer without serverSideKeepAlive) and closes a connection
//     whose client sent no KEEPALIVE within the SETUP's max lifetime. The
//     client closes the connection when it receives no message at all for
//     30 s, or no KEEPALIVE for 90 s (J; R KeepAliveHandler).
//   - Token expiry: the service's stream on WebSocket sends no periodic
//     keepalive lines (RSocket's KEEPALIVE replaces them) but still the
//     token_expires_in lines: a warning 20 s before exp, and 0 at exp,
//     after which the stream completes (S socket-route keep_alive: false;
//     sync/util.ts tokenStream).
//   - Errors: a failure on the stream is an ERROR on that stream with
//     APPLICATION_ERROR (0x201) and the message of PowerSync's
//     ServiceError, "[PSYNC_Sxxxx] <description>" (S service-errors; R
//     RequestStreamStream.onError). The client searches the message for
//     "PSYNC_": an S21xx code (auth) makes it drop its credentials, and so
//     does any error without a PSYNC_ code (but the close message
//     "Closed. "), so every error the server sends must carry its code
//     (J onError). Error codes (P): INVALID_SETUP 0x001, UNSUPPORTED_SETUP
//     0x002, REJECTED_SETUP 0x003, REJECTED_RESUME 0x004,
//     CONNECTION_ERROR 0x101, CONNECTION_CLOSE 0x102, APPLICATION_ERROR
//     0x201, REJECTED 0x202, CANCELED 0x203, INVALID 0x204.
//   - Fragmentation: none. Neither side configures a maximum fragment
//     size, and rsocket-js fragments only when one is set (R
//     RSocketConnector, RSocketServer, Fragmenter.isFragmentable: size 0
//     never fragments). So there is no reassembler here: a frame with
//     FOLLOWS is refused, and a sync line of any size is one PAYLOAD.
//   - Compression: the service enables WebSocket per-message deflate
//     (server context takeover, none for the client, 1 KB threshold, 12
//     window bits); RSocket itself compresses nothing (S
//     ReactiveSocketRouter).
//
// Where the specification and rsocket-js leave the server a choice, this
// package refuses: a version other than 1.0 (UNSUPPORTED_SETUP; P: every
// version change is incompatible), resumption (REJECTED_SETUP, P) and
// leases (UNSUPPORTED_SETUP), and every frame type PowerSync's clients do
// not send (CONNECTION_ERROR; RESUME with REJECTED_RESUME), except that
// an EXT or unknown frame with IGNORE is skipped (P "Handling Ignore
// Flag").
//
// # The transport (syncapi: websocket.go, wsframes.go, wsout.go)
//
// Written to this design; where the code departs from it, "Built:"
// says how and why. The transport is a third output of syncapi's one stream engine, not a
// second engine. Today conn (stream.go) produces every line through its
// lineWriter (encode.go: control and checkpoint lines; data.go: data
// lines), and each writeLine, uncompressed, is exactly one Write to the
// stream's streamOut (rawstream.go): httpOut through net/http, or rawOut,
// chunked on the taken-over connection. The WebSocket transport adds:
//
//   - Routing: "GET /sync/stream" with Upgrade: websocket (the POST stays
//     HTTP). No auth header: auth comes with the SETUP. The upgrade is an
//     HTTP request until then, so the ConnGuard (conns.go) bounds slow
//     upgrades; after it, the SETUP and REQUEST_STREAM must arrive within
//     BodyReadTimeout, and the read limit is MaxRequestBytes plus room for
//     the metadata (an oversized message closes with close code 1009).
//   - SETUP: Parse, Setup.Encodings, then the token from the metadata
//     through the same authenticator.authenticate(ctx, header) as the
//     HTTP header; then begin() and the shared s.active slot against
//     MaxConcurrentConnections, markStreaming, exactly as handleStream.
//     A refusal is AppendServiceError(REJECTED_SETUP, apiError's code and
//     message) on stream 0, then close.
//   - REQUEST_STREAM: the data through parseSyncRequest (JSON; BSON data
//     converted first), then newConn with a lineWriter whose out is a
//     wsOut, bson set and no compressor; one stream per connection (a
//     second is REJECTED on its stream); serveStream / openStream as for
//     rawOut, so shutdown, the grace period and the metrics are the same
//     code. The connection and bytes metrics gain a transport attribute.
//   - wsOut.Write(p): waits for a credit, then sends p as one
//     AppendPayload(NEXT) message into a reused buffer. The wait selects on
//     the stream's context (cancelled by CANCEL, the connection closing,
//     the client's max lifetime without KEEPALIVE, shutdown via
//     lineWriter.abort) and on the token's expiry, never on the write
//     timeout, which bounds only the socket write. So a client that
//     requests slowly holds its stream's goroutine, and the one line in
//     hand, not the server's memory: the stream produces the next line
//     only after this one is sent. end() sends PAYLOAD COMPLETE; an error
//     line becomes an ERROR (APPLICATION_ERROR, "[code] message") instead.
//   - A reader goroutine per connection: REQUEST_N adds credit (saturating
//     at 2^31-1) and wakes the writer; KEEPALIVE with RESPOND is answered
//     at once (not a payload: no credit); CANCEL cancels the stream, whose
//     end releases the slot at once; ERROR from the client ends the
//     connection; a frame before SETUP, a second SETUP, a request on an
//     even or reused stream id, or any *Error from Parse is answered with
//     an ERROR on stream 0 of its Code and closes, logged once.
//   - conn needs one option for this transport: no periodic keepalive
//     lines (KEEPALIVE frames keep the connection alive), token_expires_in
//     0 and the end at expiry as now.
//
// Built: as above, and
//
//   - The SETUP and the REQUEST_STREAM share one BodyReadTimeout, counted
//     from the upgrade; past it the connection closes with 1008. Until
//     the SETUP is accepted the ConnGuard keeps counting the connection
//     among the pending ones, though net/http handed it over (which ends
//     its count for an HTTP stream), so upgrades that send nothing are
//     evicted as stalled requests are. The slot is taken at the SETUP, as
//     designed, and given back if no valid REQUEST_STREAM follows.
//   - A frame other than SETUP first is INVALID_SETUP (it is a fault of
//     the setup); other connection faults are CONNECTION_ERROR, and each
//     closes with 1008 after the ERROR. A refused SETUP closes with 1000:
//     it is a normal refusal, the client retries.
//   - wsOut's writes are bounded by the connection's context (which
//     lineWriter.abort also ends), not the stream's: the library closes the
//     WebSocket when a write's context ends, so a CANCEL must end the wait
//     for credit, never a frame being written. An ERROR on stream 0 waits
//     for the frame being written (wsOut.halt), so no line follows it.
//   - The slot is freed when the stream ends (COMPLETE, ERROR, CANCEL);
//     the connection is left for the client to close (PowerSync clients
//     open one stream per connection and close it), and closed by the
//     server 5 s later. Closing it at once lost the stream's last lines:
//     the JS SDK drops the lines it has not handled when the WebSocket
//     closes (the real client missed token_expires_in 0 and reconnected
//     with its expired token). A second REQUEST_STREAM meanwhile is
//     REJECTED on its stream.
//   - For the same reason, a stream that ends without an error (at the
//     token's expiry, after token_expires_in 0) gives its client up to 5 s
//     to CANCEL it, which the SDK does on that line to reconnect with a
//     new token, before it sends COMPLETE: a COMPLETE right behind the
//     line made the SDK drop it (wsOut.end).
//   - conn has no option for this transport: the stream sends its
//     token_expires_in lines every KeepaliveInterval, as over HTTP, where
//     PowerSync's service sends none between the first and the warning
//     before expiry. Why: the JS SDK's sync client drops a Sync Streams
//     subscription whose TTL expired when such a line arrives, and data
//     lines do not do it — without them over WebSocket, an expired
//     subscription stayed synced for good (internal/testkit/clienttest's
//     TestRealClientStreams: the TTL step did not converge in 300
//     checkpoints). A line every 20 s uses a credit the client gives back
//     at once; the issue asks for keepalives "as on HTTP".
//   - The SETUP's max lifetime is honoured up to 5 minutes: a lifetime of
//     days would let a silent client that requests no lines hold a slot
//     for as long (an HTTP client that reads nothing is dropped within the
//     write timeout); PowerSync's clients ask for 90 s.
//   - Origins are not checked: the token comes in the SETUP, never from a
//     cookie, so another origin's page gains nothing (cors.go's reasoning).
//   - BSON metadata and data (no PowerSync client sends them) are decoded
//     with go.mongodb.org/mongo-driver/v2/bson, already the module's; BSON
//     request data becomes relaxed extended JSON for parseSyncRequest.
//   - syncpipe_sync_sent_bytes counts what the connection writes, RSocket
//     and WebSocket frames included. Built: the lines' bytes at first;
//     with per-message deflate the library compresses inside the socket,
//     so the hijacked connection is wrapped and counted (syncapi's
//     wswire.go), and the content_encoding is deflate where negotiated.
//   - Per-message deflate: built as the service has it where the client
//     offers it (see the library choice below).
//   - Client frames (SETUP, REQUEST_STREAM, REQUEST_N, CANCEL) are
//     appended by this package's tests only (clientframes_test.go) and by
//     internal/testkit/rsocketclient (syncapi's tests, the benchmarks): no
//     command sends them, and CI's dead code check refuses product code
//     only tests reach.
//
// The WebSocket library: github.com/coder/websocket (v1.8.15), not
// gorilla/websocket (v1.5.3). Its blocking calls take a context
// (Read(ctx), Write(ctx)), which is how the stream's cancellation,
// shutdown and lifetime reach a blocked read or write without deadline
// juggling; writes may come from several goroutines (the stream's
// payloads, the reader's keepalive answers), where gorilla allows one
// writer at a time and would need a lock of ours around every write; it
// has no dependencies; it is maintained (Coder took it over from
// nhooyr.io/websocket). It offers per-message deflate without context
// takeover (a flate writer only while a message is written, like the
// gzip stream's pooled one), where context takeover would keep a
// compressor per connection.
//
// Built: per-message deflate is taken when the client offers it, as the
// service does (@powersync/node's undici WebSocket offers it), in that
// mode, with the service's 1 KB threshold (syncapi/wswire.go). A
// connection then costs no more memory idle than without it; a data
// line costs the server its compression, which the HTTP transport's
// gzip costs too when the client asks for it. The sent-bytes metric
// counts what the connection writes (the hijacked connection is
// wrapped), so it is the wire's, compressed or not.
package rsocket
