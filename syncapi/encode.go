package syncapi

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// writeTimeout is the default Config.WriteTimeout, which bounds one
// line's write to the client: a client that reads nothing for this long
// is dropped instead of holding the stream (and the line in flight)
// forever.
const writeTimeout = time.Minute

// lineWriter writes a sync stream's lines — NDJSON, or BSON documents —
// to the response, compressed with the negotiated coding, flushing after
// every line so the client sees each one as soon as it is produced.
type lineWriter struct {
	out     streamOut
	bson    bool          // BSON documents (bsonType), else NDJSON lines
	comp    compressor    // nil: identity
	timeout time.Duration // Config.WriteTimeout
	buf     []byte        // scratch for control lines
	// bytes counts uncompressed bytes written, wire the bytes sent.
	bytes, wire int64
	// sent counts bytes sent by content type and coding (may be nil).
	sent func(n int64)

	mu       sync.Mutex // guards done against abort
	done     bool       // the stream has ended: out must not be touched
	aborting atomic.Bool
}

// compressor compresses a stream a line at a time: encode writes p's
// compressed form to out, everything a decoder needs to hand p on (last:
// and the end of the stream).
type compressor interface {
	encode(out *bytes.Buffer, p []byte, last bool) error
}

// errAborted is returned by writes after abort; errClientWrite wraps
// failed writes to the client (usually: it went away).
var (
	errAborted     = errors.New("stream aborted: server closing")
	errClientWrite = errors.New("write to client")
)

// newLineWriter sets the response headers of a sync stream — its media
// type and coding negotiated from the request's Accept and
// Accept-Encoding — and returns the writer for its lines, each to be
// written within timeout, once it has an output (open).
func newLineWriter(w http.ResponseWriter, r *http.Request, timeout time.Duration) *lineWriter {
	h := w.Header()
	ctype := negotiateType(r.Header.Values("Accept"))
	h.Set("Content-Type", ctype)
	h.Set("X-Accel-Buffering", "no")
	h.Set("Cache-Control", "no-store")
	h.Add("Vary", "Accept, Accept-Encoding")
	lw := &lineWriter{timeout: timeout, bson: ctype == bsonType}
	switch negotiateCoding(r.Header.Values("Accept-Encoding")) {
	case codingZstd:
		h.Set("Content-Encoding", codingZstd)
		lw.comp = zstdStream{}
	case codingGzip:
		h.Set("Content-Encoding", codingGzip)
		lw.comp = &gzipStream{}
	}
	return lw
}

// answerHTTP makes w the stream's output and sends the response head
// (the headers newLineWriter set).
func (lw *lineWriter) answerHTTP(w http.ResponseWriter) {
	lw.out = httpOut{w: w, rc: http.NewResponseController(w)}
	w.WriteHeader(http.StatusOK)
	_ = lw.out.Flush() // headers now: the client knows the stream is open
}

// contentType and contentEncoding are the stream's negotiated headers.
func (lw *lineWriter) contentType() string {
	if lw.bson {
		return bsonType
	}
	return ndjsonType
}

// transport is the stream's transport, for the metrics: "websocket"
// (RSocket) or "http" (a streamed response).
func (lw *lineWriter) transport() string {
	if _, ok := lw.out.(*wsOut); ok {
		return transportWebSocket
	}
	return transportHTTP
}

// The values of the metrics' transport attribute.
const (
	transportHTTP      = "http"
	transportWebSocket = "websocket"
)

func (lw *lineWriter) contentEncoding() string {
	switch lw.comp.(type) {
	case zstdStream:
		return codingZstd
	case *gzipStream:
		return codingGzip
	}
	if wo, ok := lw.out.(*wsOut); ok && wo.deflate {
		return codingDeflate // the socket compresses (wswire.go)
	}
	return codingIdentity
}

// writeLine writes one complete line (an NDJSON line ending in '\n', or a
// BSON document) and flushes it through the compressor and the
// connection.
func (lw *lineWriter) writeLine(line []byte) error {
	// Not every ResponseWriter supports deadlines; then none applies.
	_ = lw.out.SetWriteDeadline(time.Now().Add(lw.timeout))
	if lw.aborting.Load() { // checked after setting the deadline: see abort
		return errAborted
	}
	if err := lw.write(line, false); err != nil {
		return err
	}
	lw.bytes += int64(len(line))
	if err := lw.out.Flush(); err != nil {
		return fmt.Errorf("%w: flush: %w", errClientWrite, err)
	}
	return nil
}

// write sends p, compressed when the stream is (last: the end of the
// compressed stream).
func (lw *lineWriter) write(p []byte, last bool) error {
	out := p
	if lw.comp != nil {
		buf := getCompressed()
		defer putCompressed(buf)
		if err := lw.comp.encode(buf, p, last); err != nil {
			return fmt.Errorf("compress line: %w", err)
		}
		out = buf.Bytes()
	}
	n, err := lw.out.Write(out)
	sent := int64(n)
	if wo, ok := lw.out.(*wsOut); ok {
		sent = wo.wireSince() // the socket frames and may compress: count what it wrote
	}
	lw.wire += sent
	if lw.sent != nil && sent > 0 {
		lw.sent(sent)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errClientWrite, err)
	}
	return nil
}

// abort makes a write blocked on a stalled client, and every later
// write, fail at once. Safe to call from another goroutine, also after
// finish (then it does nothing).
func (lw *lineWriter) abort() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.done {
		return
	}
	lw.aborting.Store(true)
	// After the flag: a writeLine that missed it set its deadline before,
	// so this one wins.
	_ = lw.out.SetWriteDeadline(time.Now())
}

// finish marks the stream as ended: abort no longer touches out.
func (lw *lineWriter) finish() {
	lw.mu.Lock()
	lw.done = true
	lw.mu.Unlock()
}

// close ends the body, best effort: the compressed stream's trailer, if
// any, and a taken-over stream's last chunk.
func (lw *lineWriter) close() {
	if lw.aborting.Load() {
		return
	}
	_ = lw.out.SetWriteDeadline(time.Now().Add(lw.timeout))
	if lw.comp != nil {
		_ = lw.write(nil, true)
	}
	_ = lw.out.end()
}

// release drops the scratch buffer when a large line grew it: an idle
// stream keeps only what a keepalive line needs.
func (lw *lineWriter) release() {
	if cap(lw.buf) > idleScratch {
		lw.buf = nil
	}
}

// idleScratch is the scratch buffer an idle stream may keep: a keepalive
// line fits.
const idleScratch = 256

// gzipStream is the state of one gzip member (RFC 1952) written a line
// at a time without a compressor of its own: a flate writer (about 1 MB
// at BestSpeed) is taken from a pool for each line, compresses it into a
// pooled buffer ending in a sync flush, and goes back before the bytes
// are written to the client, so neither an idle stream nor one blocked on
// a stalled client holds one. Each line's deflate blocks start without
// the earlier lines' history, which DEFLATE allows (back-references are
// optional), so the blocks of all lines are one valid deflate stream;
// the header is written before the first and the trailer's CRC-32 and
// size are kept here. (One gzip member per line would be simpler, but
// not every client reads concatenated members.)
type gzipStream struct {
	started bool   // the header was written
	crc     uint32 // CRC-32 of the uncompressed bytes
	size    uint32 // uncompressed bytes, modulo 2^32 (ISIZE)
}

// storedBelow is the size under which a line is sent uncompressed, as a
// stored block: without the earlier lines' history a small line (a
// checkpoint_diff of a bucket or two, checkpoint_complete, a data line of
// an op) deflates by a few dozen bytes, and building its Huffman codes
// took a seventh of the CPU of a server streaming to a thousand clients.
const storedBelow = 512

// syncMarker is an empty stored block, as a sync flush writes it.
var syncMarker = []byte{0, 0, 0, 0xff, 0xff}

// gzipHeader: deflate, no flags, no time, XFL 4 (fastest), OS unknown.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255}

// encode writes p compressed to out, after the header if it was not
// written yet; last ends the stream: the final block and the trailer.
func (z *gzipStream) encode(out *bytes.Buffer, p []byte, last bool) error {
	if !z.started {
		out.Write(gzipHeader)
		z.started = true
	}
	if !last && len(p) < storedBelow {
		// A stored block (RFC 1951 §3.2.4) after the previous line's sync
		// flush, which ended on a byte boundary: header byte (not final,
		// type 00), LEN, NLEN, the bytes. Then the empty stored block a
		// sync flush ends with: decoders (Go's among them) hand the bytes
		// on at that marker, not at the end of a non-empty block.
		n := uint16(len(p))
		out.Write([]byte{0, byte(n), byte(n >> 8), ^byte(n), ^byte(n >> 8)})
		out.Write(p)
		out.Write(syncMarker)
		z.crc = crc32.Update(z.crc, crc32.IEEETable, p)
		z.size += uint32(len(p))
		return nil
	}
	fw := flatePool.Get().(*flate.Writer)
	fw.Reset(out)
	// Reset again before it goes back: the pool must not keep out.
	defer func() { fw.Reset(io.Discard); flatePool.Put(fw) }()
	if _, err := fw.Write(p); err != nil {
		return fmt.Errorf("deflate: %w", err)
	}
	z.crc = crc32.Update(z.crc, crc32.IEEETable, p)
	z.size += uint32(len(p))
	if !last {
		// A sync flush ends on a byte boundary with everything written:
		// the next line's blocks follow on.
		if err := fw.Flush(); err != nil {
			return fmt.Errorf("deflate: %w", err)
		}
		return nil
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("deflate: %w", err)
	}
	out.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, z.crc), z.size))
	return nil
}

// flatePool holds the flate writers of gzip streams, shared by all:
// only the streams compressing a line at the moment hold one.
var flatePool = sync.Pool{New: func() any {
	fw, _ := flate.NewWriter(io.Discard, flate.BestSpeed) // a valid level never fails
	return fw
}}

// compressedPool holds the buffers lines are compressed into.
var compressedPool sync.Pool

// maxPooledCompressed: larger buffers (a compressed line of mostly
// incompressible data) are left to the collector instead of pinned by
// the pool.
const maxPooledCompressed = 256 << 10

func getCompressed() *bytes.Buffer {
	if b, ok := compressedPool.Get().(*bytes.Buffer); ok {
		return b
	}
	return new(bytes.Buffer)
}

func putCompressed(b *bytes.Buffer) {
	if b.Cap() > maxPooledCompressed {
		return
	}
	b.Reset()
	compressedPool.Put(b)
}

// line starts a control line in the scratch buffer.
func (lw *lineWriter) line() []byte { return lw.buf[:0] }

// send writes a control line built on lw.line(): an NDJSON line gets its
// newline here.
func (lw *lineWriter) send(b []byte) error {
	if !lw.bson {
		b = append(b, '\n')
	}
	lw.buf = b
	return lw.writeLine(b)
}

func (lw *lineWriter) tokenExpiresIn(seconds int64) error {
	if lw.bson {
		b, doc := bsonOpen(lw.line())
		b = bsonInt32Elem(b, "token_expires_in", int32(min(max(seconds, -1<<31), 1<<31-1)))
		return lw.send(bsonClose(b, doc))
	}
	b := append(lw.line(), `{"token_expires_in":`...)
	b = strconv.AppendInt(b, seconds, 10)
	return lw.send(append(b, '}'))
}

func (lw *lineWriter) checkpointComplete(lastOpID int64) error {
	if lw.bson {
		b, doc := bsonOpen(lw.line())
		b, in := bsonOpenDoc(b, bsonDocument, "checkpoint_complete")
		b = bsonOpID(b, "last_op_id", lastOpID)
		return lw.send(bsonClose(bsonClose(b, in), doc))
	}
	b := append(lw.line(), `{"checkpoint_complete":{"last_op_id":`...)
	b = appendOpID(b, lastOpID)
	return lw.send(append(b, "}}"...))
}

func (lw *lineWriter) partialCheckpointComplete(lastOpID int64, priority int) error {
	if lw.bson {
		b, doc := bsonOpen(lw.line())
		b, in := bsonOpenDoc(b, bsonDocument, "partial_checkpoint_complete")
		b = bsonOpID(b, "last_op_id", lastOpID)
		b = bsonInt32Elem(b, "priority", int32(priority))
		return lw.send(bsonClose(bsonClose(b, in), doc))
	}
	b := append(lw.line(), `{"partial_checkpoint_complete":{"last_op_id":`...)
	b = appendOpID(b, lastOpID)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(priority), 10)
	return lw.send(append(b, "}}"...))
}

// streamError is an error line: the stream ends after it. On WebSocket
// it is an ERROR frame instead (wsOut.streamError).
func (lw *lineWriter) streamError(code, msg string) error {
	if o, ok := lw.out.(*wsOut); ok {
		return o.streamError(code, msg)
	}
	if lw.bson {
		b, doc := bsonOpen(lw.line())
		b, in := bsonOpenDoc(b, bsonDocument, "error")
		b = bsonStringElem(b, "code", code)
		b = bsonStringElem(b, "message", msg)
		b = bsonStringElem(b, "description", msg)
		return lw.send(bsonClose(bsonClose(b, in), doc))
	}
	b := append(lw.line(), `{"error":{"code":`...)
	b = model.AppendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = model.AppendJSONString(b, msg)
	b = append(b, `,"description":`...)
	b = model.AppendJSONString(b, msg)
	return lw.send(append(b, "}}"...))
}

// bucketEntry is one bucket of a checkpoint line.
type bucketEntry struct {
	name     string
	checksum uint32
	count    int64
	priority int
	reasons  []syncrules.StreamReason // the stream subscriptions reaching it
}

// streamsInfo is what checkpoint lines say of Sync Streams for one
// connection: the streams it subscribes to (the full checkpoint lists
// them; a bucket's {"default": i} indexes that list), and the
// subscriptions that failed. nil for rules without streams.
type streamsInfo struct {
	states []syncrules.StreamState
	errs   []syncrules.StreamError
	index  map[string]int
}

// A subscription to a stream the rules do not define is listed too, with
// an error on it (PowerSync ignores it silently, leaving the app's
// subscription inactive with no reason given).
func newStreamsInfo(plan *syncrules.RequestPlan, req *syncrules.StreamsRequest, defined []string) *streamsInfo {
	si := &streamsInfo{states: plan.Streams, errs: plan.StreamErrors, index: make(map[string]int, len(plan.Streams))}
	for i, st := range plan.Streams {
		si.index[st.Name] = i
	}
	if req == nil {
		return si
	}
	for i, sub := range req.Subscriptions {
		if slices.Contains(defined, sub.Stream) {
			continue
		}
		if _, listed := si.index[sub.Stream]; !listed {
			si.index[sub.Stream] = len(si.states)
			si.states = append(slices.Clip(si.states), syncrules.StreamState{Name: sub.Stream})
		}
		si.errs = append(slices.Clip(si.errs), syncrules.StreamError{Stream: sub.Stream, Subscription: i,
			Message: fmt.Sprintf("unknown stream %q: the sync rules define %s", sub.Stream, strings.Join(defined, ", "))})
	}
	return si
}

// checkpoint writes a full checkpoint line (diff == false) or a
// checkpoint_diff line. writeCheckpoint ≤ 0 is omitted. With streams, the
// full line lists them and every bucket its subscriptions.
func (lw *lineWriter) checkpoint(diff bool, lastOpID, writeCheckpoint int64, buckets []bucketEntry, removed []string, streams *streamsInfo) error {
	if lw.bson {
		return lw.send(appendBSONCheckpoint(lw.line(), diff, lastOpID, writeCheckpoint, buckets, removed, streams))
	}
	b := lw.line()
	if diff {
		b = append(b, `{"checkpoint_diff":{"last_op_id":`...)
	} else {
		b = append(b, `{"checkpoint":{"last_op_id":`...)
	}
	b = appendOpID(b, lastOpID)
	if writeCheckpoint > 0 {
		b = append(b, `,"write_checkpoint":`...)
		b = appendOpID(b, writeCheckpoint)
	}
	if diff {
		b = append(b, `,"updated_buckets":[`...)
	} else {
		b = append(b, `,"buckets":[`...)
	}
	for i, e := range buckets {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"bucket":`...)
		b = model.AppendJSONString(b, e.name)
		// Bucket checksums are signed 32-bit, as PowerSync sends them.
		b = append(b, `,"checksum":`...)
		b = strconv.AppendInt(b, int64(int32(e.checksum)), 10)
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, e.count, 10)
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, int64(e.priority), 10)
		if streams != nil {
			b = append(b, `,"subscriptions":[`...)
			for j, r := range e.reasons {
				if j > 0 {
					b = append(b, ',')
				}
				if r.Subscription < 0 {
					b = append(b, `{"default":`...)
					b = strconv.AppendInt(b, int64(streams.index[r.Stream]), 10)
				} else {
					b = append(b, `{"sub":`...)
					b = strconv.AppendInt(b, int64(r.Subscription), 10)
				}
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if streams != nil && !diff {
		b = appendStreams(b, streams)
	}
	if diff {
		b = append(b, `,"removed_buckets":[`...)
		for i, name := range removed {
			if i > 0 {
				b = append(b, ',')
			}
			b = model.AppendJSONString(b, name)
		}
		b = append(b, ']')
	}
	return lw.send(append(b, "}}"...))
}

// appendStreams writes a full checkpoint's "streams": each stream the
// connection subscribes to, whether it is a default one, and the errors
// of its subscriptions ({"subscription": i or "default", "message"}).
func appendStreams(b []byte, si *streamsInfo) []byte {
	b = append(b, `,"streams":[`...)
	for i, st := range si.states {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = model.AppendJSONString(b, st.Name)
		b = append(b, `,"is_default":`...)
		b = strconv.AppendBool(b, st.Default)
		b = append(b, `,"errors":[`...)
		n := 0
		for _, e := range si.errs {
			if e.Stream != st.Name {
				continue
			}
			if n++; n > 1 {
				b = append(b, ',')
			}
			b = append(b, `{"subscription":`...)
			if e.Subscription < 0 {
				b = append(b, `"default"`...)
			} else {
				b = strconv.AppendInt(b, int64(e.Subscription), 10)
			}
			b = append(b, `,"message":`...)
			b = model.AppendJSONString(b, e.Message)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, ']')
}

// opNames are the protocol names of bucketstore op codes.
var opNames = [...]string{bucketstore.OpPut: "PUT", bucketstore.OpRemove: "REMOVE",
	bucketstore.OpMove: "MOVE", bucketstore.OpClear: "CLEAR"}

// appendOp encodes one op of a data line. raw selects the data encoding:
// a JSON string holding the row (what PowerSync SDKs ask for), or the row
// as a nested object (legacy).
func appendOp(b []byte, row *bucketstore.OpRow, raw bool) []byte {
	b = append(b, `{"op_id":`...)
	b = appendOpID(b, row.OpID)
	b = append(b, `,"op":"`...)
	if int(row.Op) < len(opNames) && opNames[row.Op] != "" {
		b = append(b, opNames[row.Op]...)
	} else {
		b = strconv.AppendInt(b, int64(row.Op), 10)
	}
	b = append(b, `","object_type":`...)
	b = appendStringOrNull(b, row.ObjectType)
	b = append(b, `,"object_id":`...)
	b = appendStringOrNull(b, row.ObjectID)
	b = append(b, `,"subkey":`...)
	b = appendStringOrNull(b, row.Subkey)
	b = append(b, `,"data":`...)
	switch {
	case row.Data == nil:
		b = append(b, "null"...)
	case raw:
		b = model.AppendJSONString(b, row.Data)
	default:
		b = append(b, row.Data...)
	}
	// Op checksums are unsigned 32-bit.
	b = append(b, `,"checksum":`...)
	b = strconv.AppendUint(b, uint64(row.Checksum), 10)
	return append(b, '}')
}

func appendStringOrNull(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return model.AppendJSONString(b, s)
}

// appendOpID writes an op id as the protocol wants it: a decimal string.
func appendOpID(b []byte, id int64) []byte {
	b = append(b, '"')
	b = strconv.AppendInt(b, id, 10)
	return append(b, '"')
}
