package syncapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// Checkpoint deltas: when streams are caught up, a new checkpoint brings
// each of them the few ops written since the one before, in buckets that
// are mostly each stream's own — so the shared reads of identical
// requests (sharedread.go) do not apply, and every stream with a changed
// bucket ran a data query and a checksum query of its own (measured with
// 1,000 streams of 50 own buckets at 5,000 changes/s: 1,750 data and
// 1,070 checksum queries a second, most of the storage's CPU). Instead
// the server keeps the recent ops in memory as segments of op ids
// (from, to] between checkpoints, each read once, in one query, for every
// bucket the change records name: a caught-up stream going from one
// checkpoint to another takes its ops from the segments that tile the
// range, and a new segment's sums advance the checksum cache, so its
// changed buckets' checksums need no query either. Streams a few
// checkpoints apart share the same segments; a gap is read as one more.
const (
	maxSegmentOps   = 20000    // a range with more new ops is read per stream
	maxSegmentBytes = 16 << 20 // of op data and ids per segment
	maxSegments     = 64       // segments kept (oldest dropped first)
)

// errSegmentFull stops a segment read that passed maxSegmentBytes.
var errSegmentFull = errors.New("op segment too large")

// opSegment is every op with from < op_id ≤ to of the buckets the change
// records name for the range, by bucket, with each bucket's sums. done
// closes when ok, ops and sums are set; ok is false when the read failed
// or was too large, and streams that need it read for themselves.
type opSegment struct {
	group    int
	from, to int64
	done     chan struct{}
	ok       bool
	ops      map[string][]bucketstore.OpRow // row data share one arena per segment
	sums     map[string]bucketstore.BucketDelta
}

// checkpointDelta is the segments tiling one stream's range up to to, in
// op id order.
type checkpointDelta struct {
	group int
	to    int64
	segs  []*opSegment
}

// deltaReads holds the recent segments. Safe for concurrent use.
type deltaReads struct {
	mu   sync.Mutex
	segs []*opSegment // per group disjoint, sorted by (group, from)

	reads, served atomic.Int64 // segment queries run; stream reads answered from segments
}

// checksumAdvancer is the part of bucketstore.ChecksumCache a segment
// feeds.
type checksumAdvancer interface {
	Advance(group int, from, to int64, deltas []bucketstore.BucketDelta)
}

// delta returns the segments of group's (from, to], reading the missing
// ones, or nil when they cannot be had (the change records do not name
// the buckets, a read failed or was too large). changes is what changed
// in (from, to]: every segment read here lies within it.
func (s *Server) delta(ctx context.Context, group int, from, to int64, changes bucketstore.ChangeSet) *checkpointDelta {
	segs, mine := s.deltas.plan(group, from, to)
	if segs == nil {
		return nil
	}
	if len(mine) > 0 {
		// Listed by the stream that reads, only: the union of the change
		// records' bucket sets is the costly part of a range.
		buckets, ok := changes.Buckets()
		for _, seg := range mine {
			s.readSegment(ctx, seg, buckets, ok)
		}
	}
	for _, seg := range segs {
		select {
		case <-seg.done:
		case <-ctx.Done():
			return nil
		}
		if !seg.ok {
			return nil
		}
	}
	return &checkpointDelta{group: group, to: to, segs: segs}
}

// plan returns the segments that tile (from, to] and, of them, the new
// ones the caller must read (it inserts them, so that concurrent callers
// wait for those reads instead of repeating them). The first segment may
// start before from (its older ops are below every position a caught-up
// stream asks from); none may end after to. nil: no tiling.
func (r *deltaReads) plan(group int, from, to int64) (segs, mine []*opSegment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// First the whole tiling, then the inserts: a range found untileable
	// half-way must leave no segment behind that nobody reads.
	pos := from
	for pos < to {
		i, found := slices.BinarySearchFunc(r.segs, pos, func(seg *opSegment, pos int64) int {
			switch {
			case seg.group != group:
				return cmp.Compare(seg.group, group)
			case seg.to <= pos:
				return -1
			case seg.from > pos:
				return 1
			}
			return 0 // covers pos
		})
		if found {
			seg := r.segs[i]
			if seg.to > to {
				return nil, nil
			}
			segs, pos = append(segs, seg), seg.to
			continue
		}
		end := to // a gap up to the next segment or to
		if i < len(r.segs) && r.segs[i].group == group {
			end = min(end, r.segs[i].from)
		}
		seg := &opSegment{group: group, from: pos, to: end, done: make(chan struct{})}
		segs, mine, pos = append(segs, seg), append(mine, seg), end
	}
	for _, seg := range mine {
		i, _ := slices.BinarySearchFunc(r.segs, seg, func(a, b *opSegment) int {
			if a.group != b.group {
				return cmp.Compare(a.group, b.group)
			}
			return cmp.Compare(a.from, b.from)
		})
		r.segs = slices.Insert(r.segs, i, seg)
	}
	for len(r.segs) > maxSegments {
		r.dropOldest()
	}
	return segs, mine
}

// dropOldest forgets the segment that ends first. r.mu must be held.
func (r *deltaReads) dropOldest() {
	oldest := 0
	for i, seg := range r.segs {
		if seg.to < r.segs[oldest].to {
			oldest = i
		}
	}
	r.segs = slices.Delete(r.segs, oldest, oldest+1)
}

// forget removes seg, whose read its caller abandoned, so that the next
// stream that needs it reads it.
func (r *deltaReads) forget(seg *opSegment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.segs, seg); i >= 0 {
		r.segs = slices.Delete(r.segs, i, i+1)
	}
}

// readSegment reads seg's ops of buckets (a superset of those changed in
// its range; known false: unknown, and seg fails), feeds the checksum cache and closes seg.done. It runs under
// the caller's context; if that ends first (the client left), the segment
// is forgotten and the streams waiting for it read for themselves.
func (s *Server) readSegment(ctx context.Context, seg *opSegment, buckets []string, known bool) {
	defer close(seg.done)
	if !known {
		return // kept, failed: nothing names the range's buckets
	}
	select {
	case s.fetchSem <- struct{}{}:
	case <-ctx.Done():
		s.deltas.forget(seg)
		return
	}
	defer func() { <-s.fetchSem }()
	s.deltas.reads.Add(1)
	reqs := make([]bucketstore.BucketRequest, len(buckets))
	sums := make([]bucketstore.BucketDelta, len(buckets))
	for i, b := range buckets {
		reqs[i] = bucketstore.BucketRequest{Bucket: b, After: seg.from}
		sums[i].Bucket = b
	}
	ops := make(map[string][]bucketstore.OpRow)
	var arena []byte
	size, at := 0, 0 // at: index into sums (rows come in request order)
	more, err := s.store.ReadBucketDataShape(ctx, bucketstore.ReadLateral, seg.group, seg.to, reqs, maxSegmentOps, func(row *bucketstore.OpRow) error {
		size += len(row.Data) + len(row.ObjectID) + len(row.Subkey) + 96
		if size > maxSegmentBytes {
			return errSegmentFull
		}
		for at < len(sums) && sums[at].Bucket != row.Bucket {
			at++
		}
		if at == len(sums) {
			return fmt.Errorf("op segment read returned bucket %q out of order", row.Bucket)
		}
		sums[at].Checksum = checksum.Add(sums[at].Checksum, row.Checksum)
		sums[at].Count++
		sums[at].Clear = sums[at].Clear || row.Op == bucketstore.OpClear
		kept := *row
		if row.Data != nil {
			// The row's bytes are the driver's, reused by the next row.
			if cap(arena)-len(arena) < len(row.Data) {
				arena = make([]byte, 0, max(64<<10, len(row.Data)))
			}
			start := len(arena)
			arena = append(arena, row.Data...)
			kept.Data = arena[start:len(arena):len(arena)]
		}
		ops[row.Bucket] = append(ops[row.Bucket], kept)
		return nil
	})
	if err == nil && !more {
		// A group taken over is cleared: a segment read once that began
		// may lack ops, and its sums would advance the checksum cache
		// short of them. Streams that read for themselves check too.
		var v bucketstore.Validity
		if v, err = s.store.ReadValidity(ctx, seg.group); err == nil {
			err = v.Stopped(seg.group)
		}
	}
	if ctx.Err() != nil {
		s.deltas.forget(seg)
		return
	}
	if err != nil || more {
		if err != nil && !errors.Is(err, errSegmentFull) {
			s.log.Debug("op segment read failed; streams read for themselves", "err", err)
		}
		return // kept, failed: its streams read for themselves until it is dropped
	}
	if a, ok := s.cache.(checksumAdvancer); ok {
		a.Advance(seg.group, seg.from, seg.to, sums)
	}
	bySum := make(map[string]bucketstore.BucketDelta, len(ops))
	for _, d := range sums {
		if d.Count > 0 {
			bySum[d.Bucket] = d
		}
	}
	seg.ops, seg.sums, seg.ok = ops, bySum, true
}

// fillFromDelta encodes reqs' ops from c.delta into c.batch and reports
// whether it could: every request must be a bucket the client had whole
// at the delta's start (not behind: neither new to it nor left unfinished
// by an interrupted send), and the ops must fit one batch. On false the
// batch is empty and the caller reads storage.
func (c *conn) fillFromDelta(cp bucketstore.Checkpoint, reqs []bucketstore.BucketRequest) bool {
	d := c.delta
	if d == nil || d.to != cp.OpID || d.group != cp.GroupID {
		return false
	}
	for _, r := range reqs {
		if st := c.bucket(r.Bucket); st == nil || st.behind {
			return false // its ops before the delta are not all sent
		}
	}
	invalidated := c.batch.invalidated
	c.batch.reset()
	f := c.format()
	for _, r := range reqs {
		for _, seg := range d.segs {
			rows := seg.ops[r.Bucket]
			for i := range rows {
				row := &rows[i]
				if row.OpID <= r.After {
					continue
				}
				if row.TargetOp > cp.OpID {
					c.batch.invalidated = true
				}
				if !c.batch.add(row, r.After, f) {
					c.batch.reset()
					c.batch.invalidated = invalidated
					return false
				}
			}
		}
	}
	if c.batch.open {
		c.batch.closeLine(false, f)
	}
	c.s.deltas.served.Add(1)
	return true
}

// sum adds up bucket's ops in the delta after op id from: what its
// checksum and count grew by. ok is false when one of them is a CLEAR,
// which replaces what came before it. A segment after from gives its
// sums as read; only one that starts before from (the first) is summed
// from its rows.
func (d *checkpointDelta) sum(bucket string, from int64) (sum uint32, count int64, ok bool) {
	for _, seg := range d.segs {
		if seg.from >= from {
			ds := seg.sums[bucket]
			if ds.Clear {
				return 0, 0, false
			}
			sum, count = checksum.Add(sum, ds.Checksum), count+ds.Count
			continue
		}
		rows := seg.ops[bucket]
		for i := range rows {
			if rows[i].OpID <= from {
				continue
			}
			if rows[i].Op == bucketstore.OpClear {
				return 0, 0, false
			}
			sum = checksum.Add(sum, rows[i].Checksum)
			count++
		}
	}
	return sum, count, true
}
