package syncapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// Data batching: one storage read returns at most readBatchOps ops and
// about maxBatchBytes of encoded ops. A data line holds one bucket's share
// of a read, so lines stay within both limits too (a single op larger
// than maxBatchBytes travels alone).
const (
	readBatchOps  = 1000
	maxBatchBytes = 1 << 20
)

// errBatchFull stops a read whose encoded ops reached maxBatchBytes.
var errBatchFull = errors.New("batch full")

// dataLine is one encoded data line of a batch.
type dataLine struct {
	bucket    string
	after     int64
	nextAfter int64
	ops       int
	end       int // offset in batch.buf just past the line's newline
}

// lineFormat is how a stream encodes its data lines and their op data.
type lineFormat uint8

const (
	// jsonRaw: NDJSON, op data as a JSON string (raw_data: what the SDKs
	// ask for).
	jsonRaw lineFormat = iota
	// jsonNested: NDJSON, op data as a nested object (legacy clients).
	jsonNested
	// bsonLines: BSON documents, op data as a JSON string.
	bsonLines
)

// format is the stream's lineFormat.
func (c *conn) format() lineFormat {
	switch {
	case c.w.bson:
		return bsonLines
	case c.req.rawData:
		return jsonRaw
	}
	return jsonNested
}

// batch is the encoded data lines of one storage read: ops are encoded
// straight into buf as they are read (no per-op values), so the read's
// connection is released before anything is written to the client.
type batch struct {
	buf   []byte
	lines []dataLine
	open  bool // the last line's ops array is not closed yet
	// doc, inner and arr are where the open BSON line's document, its
	// "data" document and their ops array start in buf.
	doc, inner, arr int
	ops             int
	// invalidated: an op compacted beyond the checkpoint was read, so the
	// checkpoint cannot be completed (PowerSync's target_op rule).
	invalidated bool
	// shared: buf and lines are a shared read's (sharedread.go), which
	// every stream that joined it sends from: read-only.
	shared bool
}

// reset empties the batch for the next read, keeping its buffers unless
// they are a shared read's.
func (b *batch) reset() {
	if b.shared {
		b.buf, b.lines, b.shared = nil, nil, false
	}
	b.buf, b.lines, b.open, b.ops = b.buf[:0], b.lines[:0], false, 0
}

// release drops the batch's buffers. They grow to the largest read of a
// burst (up to maxBatchBytes and more), so a stream that kept them would
// hold a first sync's megabyte for as long as it stays connected; the
// next burst grows new ones to its own size.
func (b *batch) release() { *b = batch{} }

// add encodes one op in format f, opening a line for its bucket if
// needed (after is the bucket's position before this read). It returns
// false, leaving the batch unchanged, when the op would take a non-empty
// batch beyond maxBatchBytes.
func (b *batch) add(row *bucketstore.OpRow, after int64, f lineFormat) bool {
	bufLen, nLines, open := len(b.buf), len(b.lines), b.open
	doc, inner, arr := b.doc, b.inner, b.arr
	var last dataLine
	if nLines > 0 {
		last = b.lines[nLines-1]
	}
	if b.open && b.lines[len(b.lines)-1].bucket != row.Bucket {
		b.closeLine(false, f) // the read moved on: that bucket is complete
	}
	if !b.open {
		b.lines = append(b.lines, dataLine{bucket: row.Bucket, after: after})
		b.open = true
		b.openLine(row.Bucket, after, f)
	}
	l := &b.lines[len(b.lines)-1]
	switch f {
	case bsonLines:
		b.buf = appendBSONOp(b.buf, l.ops, row)
	default:
		if l.ops > 0 {
			b.buf = append(b.buf, ',')
		}
		b.buf = appendOp(b.buf, row, f == jsonRaw)
	}
	if b.ops > 0 && len(b.buf) > maxBatchBytes {
		b.buf, b.lines, b.open = b.buf[:bufLen], b.lines[:nLines], open
		b.doc, b.inner, b.arr = doc, inner, arr
		if nLines > 0 {
			b.lines[nLines-1] = last
		}
		return false
	}
	l.ops++
	l.nextAfter = row.OpID
	b.ops++
	return true
}

// openLine starts the data line of bucket, up to its ops.
func (b *batch) openLine(bucket string, after int64, f lineFormat) {
	if f == bsonLines {
		b.buf, b.doc = bsonOpen(b.buf)
		b.buf, b.inner = bsonOpenDoc(b.buf, bsonDocument, "data")
		b.buf = bsonStringElem(b.buf, "bucket", bucket)
		b.buf = bsonOpID(b.buf, "after", after)
		b.buf, b.arr = bsonOpenDoc(b.buf, bsonArray, "data")
		return
	}
	b.buf = append(b.buf, `{"data":{"bucket":`...)
	b.buf = model.AppendJSONString(b.buf, bucket)
	b.buf = append(b.buf, `,"after":`...)
	b.buf = appendOpID(b.buf, after)
	b.buf = append(b.buf, `,"data":[`...)
}

// closeLine ends the open line.
func (b *batch) closeLine(hasMore bool, f lineFormat) {
	l := &b.lines[len(b.lines)-1]
	if f == bsonLines {
		b.buf = bsonClose(b.buf, b.arr)
		b.buf = bsonOpID(b.buf, "next_after", l.nextAfter)
		b.buf = bsonBoolElem(b.buf, "has_more", hasMore)
		b.buf = bsonClose(bsonClose(b.buf, b.inner), b.doc)
	} else {
		b.buf = append(b.buf, `],"next_after":`...)
		b.buf = appendOpID(b.buf, l.nextAfter)
		b.buf = append(b.buf, `,"has_more":`...)
		b.buf = strconv.AppendBool(b.buf, hasMore)
		b.buf = append(b.buf, "}}\n"...)
	}
	l.end = len(b.buf)
	b.open = false
}

// sendData sends the ops of the pending buckets up to the target
// checkpoint, highest priority first, with partial_checkpoint_complete
// after each priority but the last and checkpoint_complete at the end.
// After every batch of data lines it looks for a newer storage checkpoint.
// One that arrives within supersedeAfter of the start waits for this one
// to complete and is returned then (superseded, served next); after that,
// a newer one stops the send at once (a long download moves to the newest
// data), and what was sent is kept in the bucket positions, so nothing is
// sent twice. Completing first matters under load: a stream interrupted at
// every checkpoint never completes one, and its buckets, never whole at a
// checkpoint, cannot be served from the shared op segments (delta.go).
func (c *conn) sendData(ctx context.Context) (next bucketstore.Checkpoint, superseded bool, err error) {
	cp := c.target
	began := time.Now()
	// newer: a checkpoint that arrived while this one was sent, served
	// next — after this one completes, unless sending it takes long.
	var newer bucketstore.Checkpoint
	haveNewer := false
	var prios []int
	for i := range c.sent {
		st := &c.sent[i]
		if st.pending && st.after >= cp.OpID {
			st.pending = false
		}
		if st.pending && !slices.Contains(prios, st.priority) {
			prios = append(prios, st.priority)
		}
	}
	slices.Sort(prios)
	c.batch.invalidated = false
	c.readStorage = false
	for i, prio := range prios {
		var reqs []bucketstore.BucketRequest
		for _, st := range c.sent {
			if st.pending && st.priority == prio {
				reqs = append(reqs, bucketstore.BucketRequest{Bucket: st.name, After: st.after})
			}
		}
		// Read in bucket name order (byte order), the order in which the
		// snapshot writes each chunk's PUTs (bucketstore.Writer): a
		// bucket's ops sit in short runs, one per chunk, beside the
		// runs of its neighbours in that order, so reading the next
		// bucket in that order finds the heap pages the previous read
		// just brought into shared buffers. In any other order (the
		// rules' order is the parameter query's) a drain larger than
		// shared buffers reads each heap page once per bucket on it:
		// measured at 10M todos, 0.16 heap reads per op instead of
		// 0.04. The ReadORChain baseline needs this order too.
		slices.SortFunc(reqs, func(a, b bucketstore.BucketRequest) int { return strings.Compare(a.Bucket, b.Bucket) })
		for len(reqs) > 0 {
			more, err := c.readBatch(ctx, cp, reqs)
			if err != nil {
				return next, false, err
			}
			start := 0
			for _, l := range c.batch.lines {
				if err := c.w.writeLine(c.batch.buf[start:l.end]); err != nil {
					return next, false, err
				}
				start = l.end
				st := c.bucket(l.bucket)
				if st == nil {
					return next, false, fmt.Errorf("bucket data read returned bucket %q, which the client was not told of", l.bucket)
				}
				st.after = l.nextAfter
				c.opsSent += int64(l.ops)
				c.s.opsSynced.Add(ctx, int64(l.ops))
				if c.s.afterDataLine != nil {
					c.s.afterDataLine()
				}
			}
			// A newer checkpoint is looked for once the batch is sent, not
			// after each of its lines: the rest of a batch read is valid
			// for the newer checkpoint too, and a busy stream that dropped
			// it at every new checkpoint would read the same rows again
			// and again (measured: 9 rows read per op sent with 1,000
			// streams and 5 checkpoints a second).
			if next, ok, err := c.poll(ctx, false); err != nil {
				return next, false, err
			} else if ok {
				if time.Since(began) >= c.s.supersedeAfter {
					return next, true, nil
				}
				newer, haveNewer = next, true
			}
			if reqs, err = c.advance(reqs, more); err != nil {
				return next, false, err
			}
		}
		if err := c.checkValidity(ctx, cp); err != nil {
			return next, false, err
		}
		if i < len(prios)-1 && !c.batch.invalidated {
			if err := c.w.partialCheckpointComplete(cp.OpID, prio); err != nil {
				return next, false, err
			}
		}
	}
	if c.batch.invalidated {
		// Compaction moved ops beyond this checkpoint, or its group was
		// taken over and is being cleared: complete a later one (a newer
		// group's, when the group changed: prepare follows it).
		c.forceAnnounce = true
		return newer, haveNewer, nil
	}
	if err := c.w.checkpointComplete(cp.OpID); err != nil {
		return next, false, err
	}
	c.complete = true
	return newer, haveNewer, nil
}

// checkValidity tells whether the ops of checkpoint cp that this stream
// read from storage were complete, and invalidates cp if not:
//
//   - Compaction may have rewritten some: the group's floor (the last
//     checkpoint it started from) is above cp. A CLEAR can then have
//     taken ops the client had not read yet, and it sits beyond cp, so
//     the reads cannot show it; a later checkpoint is completed.
//   - The group was taken over and its storage is being cleared: the
//     reads may have found part of it only. The new group's checkpoint
//     is completed instead (prepare follows the group change).
//
// Both are read after the data (a later statement): compaction sets the
// floor before it rewrites anything, and clearing starts only once the
// group's stop has committed, so a read that saw a rewrite or a deletion
// is followed by one that sees the floor or the stop. Streams served from
// the shared op segments only (delta.go), whose reads checked the group
// themselves, read nothing compaction touched and ask nothing. (What
// prepare read — parameter rows, checksums, change records — checked the
// group in or after its own statement: ErrGroupStopped.)
func (c *conn) checkValidity(ctx context.Context, cp bucketstore.Checkpoint) error {
	if !c.readStorage || c.batch.invalidated {
		return nil
	}
	v, err := c.s.store.ReadValidity(ctx, cp.GroupID)
	if err != nil {
		return err
	}
	if v.CompactFloor > cp.OpID || !v.Serving {
		c.batch.invalidated = true
	}
	return nil
}

// advance drops the requests a read completed and moves the one it
// stopped in to where it stopped (see ReadBucketData's more).
func (c *conn) advance(reqs []bucketstore.BucketRequest, more bool) ([]bucketstore.BucketRequest, error) {
	if !more {
		c.done(reqs)
		return nil, nil
	}
	lines := c.batch.lines
	if len(lines) == 0 {
		return nil, errors.New("bucket data read reported more rows but returned none")
	}
	last := lines[len(lines)-1].bucket
	i := slices.IndexFunc(reqs, func(r bucketstore.BucketRequest) bool { return r.Bucket == last })
	if i < 0 {
		return nil, fmt.Errorf("bucket data read returned unrequested bucket %q", last)
	}
	c.done(reqs[:i])
	reqs = reqs[i:]
	reqs[0].After = c.bucket(last).after
	return reqs, nil
}

// done marks the buckets of reqs as sent up to the target checkpoint.
// They are the client's buckets: sendData requested them.
func (c *conn) done(reqs []bucketstore.BucketRequest) {
	for _, r := range reqs {
		c.bucket(r.Bucket).pending = false
	}
}

// readOwn reads the next ops of reqs up to cp into c.batch, holding a
// data fetch slot for the duration of the query only.
func (c *conn) readOwn(ctx context.Context, cp bucketstore.Checkpoint, reqs []bucketstore.BucketRequest) (more bool, err error) {
	c.readStorage = true
	select {
	case c.s.fetchSem <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-c.s.fetchSem }()
	ctx, span := c.s.tracer.Start(ctx, "syncapi.data_batch",
		trace.WithAttributes(attrGroup.Int(cp.GroupID), attrCheckpoint.Int64(cp.OpID), attrBuckets.Int(len(reqs))))
	defer span.End()
	c.batch.reset()
	idx := 0
	f := c.format()
	more, err = c.s.store.ReadBucketDataShape(ctx, c.s.cfg.Baseline.ReadShape, cp.GroupID, cp.OpID, reqs, readBatchOps, func(row *bucketstore.OpRow) error {
		for idx < len(reqs) && reqs[idx].Bucket != row.Bucket {
			idx++
		}
		if idx == len(reqs) {
			return fmt.Errorf("bucket data read returned bucket %q out of order", row.Bucket)
		}
		if row.TargetOp > cp.OpID {
			c.batch.invalidated = true
		}
		if !c.batch.add(row, reqs[idx].After, f) {
			return errBatchFull
		}
		return nil
	})
	if errors.Is(err, errBatchFull) {
		more, err = true, nil
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return false, err
	}
	if c.batch.open {
		c.batch.closeLine(more, f)
	}
	span.SetAttributes(attrOps.Int(c.batch.ops), attrBytes.Int(len(c.batch.buf)), attrMore.Bool(more))
	return more, nil
}
