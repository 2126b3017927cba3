package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/klauspost/compress/zstd"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/syncapi"
)

// The benchmark's own token settings: an HS256 secret and audience known
// only to this process.
const (
	drainSecret   = "syncpipe-drain-benchmark-secret-0123456789"
	drainAudience = "syncpipe-bench"
	// drainMaxBuckets is the benchmark's max_buckets_per_connection: the
	// default (1000) is below 1k lists + the global bucket.
	drainMaxBuckets = 10_000
)

// errDrainTimeout reports a drain cut off by DrainOptions.BaselineTimeout.
var errDrainTimeout = errors.New("drain cut off")

// drainStats is what the client saw of one drain.
type drainStats struct {
	total      time.Duration // request sent → checkpoint_complete read
	checkpoint time.Duration // request sent → checkpoint line read
	ops, bytes int64         // bytes: of the lines, uncompressed
	wire       int64         // bytes as received (compressed)
}

// drainWire is what a drain asks the server for: the response's media
// type and coding.
type drainWire struct {
	name, accept, encoding string
	// ws: over the WebSocket transport (GET /sync/stream, RSocket), as
	// the SDKs' connectionMethod 'web-socket': BSON lines (accept is not
	// asked for); encoding "deflate" offers per-message deflate, as
	// @powersync/node's WebSocket does.
	ws bool
}

// The drain's wire formats: NDJSON without compression (what the P4 bar
// is measured on), and what the PowerSync SDKs ask for, BSON, with zstd
// (as a browser's fetch asks for it).
var (
	wireNDJSON    = drainWire{name: "NDJSON", accept: "application/x-ndjson", encoding: "identity"}
	wireBSONZstd  = drainWire{name: "BSON+zstd", accept: "application/vnd.powersync.bson-stream;q=0.9,application/x-ndjson;q=0.8", encoding: "zstd"}
	wireWebSocket = drainWire{name: "WebSocket", encoding: "identity", ws: true}
	wireWSDeflate = drainWire{name: "WebSocket+deflate", encoding: "deflate", ws: true}
)

// label names the wire format in the server-CPU table.
func (w drainWire) label() string {
	switch {
	case w.ws && w.encoding == "deflate":
		return "BSON over WebSocket, deflate"
	case w.ws:
		return "BSON over WebSocket"
	case w.encoding == "zstd":
		return "BSON + zstd"
	}
	return "NDJSON + identity"
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// drainServer is a sync API over one data set's storage: in-process, or
// a `syncpipe run --role api` child.
type drainServer struct {
	url   string
	srv   *syncapi.Server
	http  *http.Server
	child *Child
	token string
}

// startDrainServer serves the data set with the given query shape on a
// loopback port: from a syncpipe child if h is set (which reads with
// the default shape, LATERAL), else in-process. The checksum cache holds a
// single entry, so that every drain computes its buckets' checksums, as
// the first client after a new checkpoint does: a run measures a first
// sync, not a cache hit, and runs do not depend on their order.
func startDrainServer(ctx context.Context, h *Harness, d *drainData, shape bucketstore.ReadShape) (*drainServer, error) {
	tok, err := drainToken()
	if err != nil {
		return nil, err
	}
	if h != nil {
		child, url, err := h.startAPIChild(ctx, apiChildConfig{Storage: d.storeURI, Secret: drainSecret, Audience: drainAudience,
			MaxBuckets: drainMaxBuckets, CacheSize: 1})
		if err != nil {
			return nil, fmt.Errorf("start the sync API child: %w", err)
		}
		return &drainServer{url: url, child: child, token: tok}, nil
	}
	srv, err := syncapi.New(ctx, syncapi.Config{Groups: d.store.Catalog(), Store: d.store.Reader(), Sources: d.store.Reader(),
		Auth:                    config.Auth{Audience: []string{drainAudience}, HS256Secrets: []string{drainSecret}, MaxLifetime: 24 * time.Hour},
		MaxBucketsPerConnection: drainMaxBuckets, ChecksumCacheSize: 1, Baseline: syncapi.Baseline{ReadShape: shape}})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("listen for the sync API: %w", err)
	}
	ds := &drainServer{url: "http://" + ln.Addr().String(), srv: srv, token: tok,
		http: &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = ds.http.Serve(ln) }()
	return ds, nil
}

// close ends open streams, then the server, and returns a child's peak
// RSS (0 in-process).
func (ds *drainServer) close() int64 {
	if ds.child != nil {
		st, _ := ds.child.Stop()
		return st.PeakRSS
	}
	ds.srv.Close()
	_ = ds.http.Close()
	return 0
}

// meter samples the CPU of this server's processes: the child's, if it
// is one, and the storage cluster's (postmaster; 0 = not measured).
func (ds *drainServer) meter(postmaster int) drainMeter {
	m := drainMeter{postmaster: postmaster}
	if ds.child != nil {
		m.child = ds.child.Pid()
	}
	return m
}

// drainOnce drains every bucket with one new client. timeout > 0 cuts the
// drain off (errDrainTimeout, with the partial stats).
func (ds *drainServer) drainOnce(ctx context.Context, timeout time.Duration, wire drainWire) (drainStats, error) {
	dctx := ctx
	if timeout > 0 {
		var stop context.CancelFunc
		dctx, stop = context.WithTimeout(ctx, timeout)
		defer stop()
	}
	st, err := drain(dctx, ds.url, ds.token, false, wire)
	if err != nil && dctx.Err() != nil && ctx.Err() == nil {
		return st, errDrainTimeout
	}
	return st, err
}

// warm opens a stream and leaves after its checkpoint line: the server's
// checkpoint watcher, parsed rules and pooled connections are then ready,
// as on a server that has been running, and no data is read.
func (ds *drainServer) warm(ctx context.Context) error {
	_, err := drain(ctx, ds.url, ds.token, true, wireNDJSON)
	return err
}

// drainToken mints a token for a user that, with the todo rules, is
// entitled to every bucket (the by_list parameter query has no filter).
func drainToken() (string, error) {
	now := time.Now()
	claims := jwt.MapClaims{"sub": "bench-user", "aud": drainAudience, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(drainSecret))
	if err != nil {
		return "", fmt.Errorf("sign benchmark token: %w", err)
	}
	return tok, nil
}

// drainRequest is the drain's sync request: a new client.
const drainRequest = `{"buckets":[],"include_checksum":true,"raw_data":true,"client_id":"drain-bench"}`

// drain is the client: one POST /sync/stream as a new client (no buckets
// held), read until checkpoint_complete. It counts ops without decoding
// data lines — with raw_data every row is a JSON string, so `{"op_id":`
// occurs only where an op starts — so the client's own CPU (on the same
// two cores as the server) stays small; the checkpoint line is decoded
// for the op count the drain must reach. With checkpointOnly it returns
// after the checkpoint line.
func drain(ctx context.Context, url, token string, checkpointOnly bool, wire drainWire) (drainStats, error) {
	if wire.ws {
		return drainWS(ctx, url, token, wire.encoding == "deflate", checkpointOnly)
	}
	var st drainStats
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/sync/stream", strings.NewReader(drainRequest))
	if err != nil {
		return st, fmt.Errorf("build sync request: %w", err)
	}
	req.Header.Set("Authorization", "Token "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", wire.accept)
	req.Header.Set("Accept-Encoding", wire.encoding)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("sync request: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return st, fmt.Errorf("sync request: HTTP %d: %s", resp.StatusCode, msg)
	}
	var body io.Reader = countingReader{resp.Body, &st.wire}
	if ct, ce := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding"); ct != strings.Split(wire.accept, ";")[0] || ce != strings.TrimPrefix(wire.encoding, "identity") {
		return st, fmt.Errorf("sync stream: asked for %s with %s, got %s with %q", wire.accept, wire.encoding, ct, ce)
	}
	if wire.encoding == "zstd" {
		d, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return st, fmt.Errorf("zstd stream: %w", err)
		}
		defer d.Close()
		body = d
	}
	if wire == wireBSONZstd {
		res, err := drainBSON(bufio.NewReaderSize(body, 1<<20), st, start, checkpointOnly)
		res.wire = st.wire // counted into st while drainBSON read
		return res, err
	}
	r := bufio.NewReaderSize(body, 1<<20)
	var long []byte // a line longer than the reader's buffer
	opStart := []byte(`{"op_id":`)
	want := int64(-1)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if long != nil {
			line, long = append(long, line...), nil
		}
		st.bytes += int64(len(line))
		st.total = time.Since(start)
		if err != nil {
			return st, fmt.Errorf("read sync stream after %d ops: %w", st.ops, err)
		}
		switch {
		case bytes.HasPrefix(line, []byte(`{"data":`)):
			st.ops += int64(bytes.Count(line, opStart))
		case bytes.HasPrefix(line, []byte(`{"checkpoint":`)):
			st.checkpoint = st.total
			if want, err = checkpointOps(line); err != nil || checkpointOnly {
				return st, err
			}
		case bytes.HasPrefix(line, []byte(`{"checkpoint_complete":`)):
			if want >= 0 && st.ops != want {
				return st, fmt.Errorf("checkpoint complete after %d ops; the checkpoint counted %d", st.ops, want)
			}
			return st, nil
		case bytes.HasPrefix(line, []byte(`{"error":`)):
			return st, fmt.Errorf("sync stream error: %s", bytes.TrimSpace(line))
		}
	}
}

// drainBSON is drain's reading of a BSON stream: documents split by their
// length prefix, each told apart by its first key; a data line's ops are
// the length of its ops array.
func drainBSON(r *bufio.Reader, st drainStats, start time.Time, checkpointOnly bool) (drainStats, error) {
	want := int64(-1)
	var doc []byte
	for {
		var n [4]byte
		_, err := io.ReadFull(r, n[:])
		st.total = time.Since(start)
		if err != nil {
			return st, fmt.Errorf("read sync stream after %d ops: %w", st.ops, err)
		}
		size := int(binary.LittleEndian.Uint32(n[:]))
		if size < 5 || size > 64<<20 {
			return st, fmt.Errorf("sync stream: BSON document of %d bytes", size)
		}
		doc = append(append(doc[:0], n[:]...), make([]byte, size-4)...)
		if _, err := io.ReadFull(r, doc[4:]); err != nil {
			return st, fmt.Errorf("read sync stream after %d ops: %w", st.ops, err)
		}
		st.bytes += int64(size)
		st.total = time.Since(start)
		if done, err := bsonLine(doc, &st, &want, checkpointOnly); done || err != nil {
			return st, err
		}
	}
}

// bsonLine counts one BSON line into st: the ops of a data line, the
// checkpoint's count (want, the ops the drain must reach). done is true
// at checkpoint_complete, or after the checkpoint with checkpointOnly.
func bsonLine(doc []byte, st *drainStats, want *int64, checkpointOnly bool) (done bool, err error) {
	raw := bson.Raw(doc)
	first, err := raw.IndexErr(0)
	if err != nil {
		return false, fmt.Errorf("sync stream: BSON document: %w", err)
	}
	switch first.Key() {
	case "data":
		ops, err := raw.LookupErr("data", "data")
		if err != nil {
			return false, fmt.Errorf("sync stream: data line: %w", err)
		}
		vals, err := ops.Array().Values()
		if err != nil {
			return false, fmt.Errorf("sync stream: data line: %w", err)
		}
		st.ops += int64(len(vals))
	case "checkpoint":
		st.checkpoint = st.total
		js, err := bson.MarshalExtJSON(raw, false, false)
		if err != nil {
			return false, fmt.Errorf("sync stream: checkpoint line: %w", err)
		}
		if *want, err = checkpointOps(js); err != nil || checkpointOnly {
			return true, err
		}
	case "checkpoint_complete":
		if *want >= 0 && st.ops != *want {
			return true, fmt.Errorf("checkpoint complete after %d ops; the checkpoint counted %d", st.ops, *want)
		}
		return true, nil
	case "error":
		return true, fmt.Errorf("sync stream error: %s", raw)
	}
	return false, nil
}

// checkpointOps sums the bucket counts of a checkpoint line.
func checkpointOps(line []byte) (int64, error) {
	var cp struct {
		Checkpoint struct {
			Buckets []struct {
				Count int64 `json:"count"`
			} `json:"buckets"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(line, &cp); err != nil {
		return 0, fmt.Errorf("decode checkpoint line: %w", err)
	}
	var n int64
	for _, b := range cp.Checkpoint.Buckets {
		n += b.Count
	}
	return n, nil
}
