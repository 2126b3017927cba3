package syncapi

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// Shared reads: after an incremental checkpoint, caught-up streams read
// the same few new ops (a bucket everybody has, from where the previous
// checkpoint left it). Streams whose read is identical — same group,
// checkpoint, encoding, and buckets with the same positions — share one
// storage read and its encoded lines instead of each running the query.
// Only streams that completed their previous checkpoint share: a first
// sync or a resumed one reads alone, so a lone client draining many ops
// never copies its batches and never waits for another stream's read.
const (
	maxSharedReqs  = 16       // reads of more buckets are per stream
	maxSharedReads = 256      // entries per checkpoint
	maxSharedTotal = 64 << 20 // bytes of results kept per checkpoint
)

// sharedReads holds the reads of the newest checkpoint seen. Safe for
// concurrent use.
type sharedReads struct {
	mu      sync.Mutex
	group   int
	cp      int64
	entries map[string]*sharedRead
	bytes   int // of the entries' results

	copied atomic.Int64 // reads answered from another stream's read
}

// sharedRead is one read; done closes when the rest is set. ok is false
// when the read failed or was too large to keep: waiters read themselves.
type sharedRead struct {
	done        chan struct{}
	ok          bool
	buf         []byte
	lines       []dataLine
	ops         int
	more        bool
	invalidated bool
}

// join returns the read for key at (group, cp) and whether the caller
// must perform it; nil when the read cannot be shared (an older
// checkpoint, or too many entries).
func (s *sharedReads) join(group int, cp int64, key string) (r *sharedRead, leader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if group != s.group || cp > s.cp {
		s.group, s.cp, s.entries, s.bytes = group, cp, map[string]*sharedRead{}, 0
	}
	if cp != s.cp {
		return nil, false
	}
	if r := s.entries[key]; r != nil {
		return r, false
	}
	if len(s.entries) >= maxSharedReads || s.bytes >= maxSharedTotal {
		return nil, false
	}
	r = &sharedRead{done: make(chan struct{})}
	s.entries[key] = r
	return r, true
}

// keep reserves room for a result of n bytes at (group, cp).
func (s *sharedReads) keep(group int, cp int64, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if group != s.group || cp != s.cp || s.bytes+n > maxSharedTotal {
		return false
	}
	s.bytes += n
	return true
}

// readKey identifies a read; "" when it is not to be shared.
func (c *conn) readKey(reqs []bucketstore.BucketRequest) string {
	if !c.caughtUp || len(reqs) > maxSharedReqs {
		return ""
	}
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, int64(c.format()), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(c.s.cfg.Baseline.ReadShape), 10)
	for _, r := range reqs {
		b = append(b, '|')
		b = strconv.AppendInt(b, r.After, 10)
		b = append(b, ':')
		b = append(b, r.Bucket...)
	}
	return string(b)
}

// readBatch reads the next ops of reqs up to cp into c.batch, sharing
// small reads with streams that read the same: the first stream to ask
// performs the read and keeps its result, the others copy it.
func (c *conn) readBatch(ctx context.Context, cp bucketstore.Checkpoint, reqs []bucketstore.BucketRequest) (bool, error) {
	if c.fillFromDelta(cp, reqs) {
		return false, nil
	}
	key := c.readKey(reqs)
	if key == "" {
		return c.readOwn(ctx, cp, reqs)
	}
	r, leader := c.s.reads.join(cp.GroupID, cp.OpID, key)
	if r == nil {
		return c.readOwn(ctx, cp, reqs)
	}
	if leader {
		invalidated := c.batch.invalidated
		c.batch.invalidated = false
		more, err := c.readOwn(ctx, cp, reqs)
		if err == nil && c.s.reads.keep(cp.GroupID, cp.OpID, len(c.batch.buf)) {
			r.ok, r.more, r.ops, r.invalidated = true, more, c.batch.ops, c.batch.invalidated
			r.buf = append([]byte(nil), c.batch.buf...)
			r.lines = append([]dataLine(nil), c.batch.lines...)
		}
		c.batch.invalidated = c.batch.invalidated || invalidated
		close(r.done)
		return more, err
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if !r.ok {
		return c.readOwn(ctx, cp, reqs)
	}
	c.readStorage = true // another stream's storage read
	// Sent from the shared result itself: a copy per stream would make
	// every caught-up stream hold the same bytes while it writes them.
	c.batch.reset()
	c.batch.buf, c.batch.lines, c.batch.shared = r.buf, r.lines, true
	c.batch.ops = r.ops
	c.batch.invalidated = c.batch.invalidated || r.invalidated
	c.s.reads.copied.Add(1)
	return r.more, nil
}
