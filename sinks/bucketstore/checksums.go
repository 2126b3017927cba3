package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/syncpipe/syncpipe/stages/checksum"
)

// BucketChecksum is a bucket's state at a checkpoint: the sum of its ops'
// checksums modulo 2^32 and the number of its ops.
type BucketChecksum struct {
	Bucket   string
	Checksum uint32
	Count    int64
}

// ChecksumCache serves bucket checksums at checkpoints from an LRU of
// (group, bucket, checkpoint) entries. An entry holds a bucket's state at
// the checkpoint it was computed at and is valid up to a later checkpoint
// ("until"): when a bucket is asked at a checkpoint above its newest
// entry, the change records (changerecords.go) of the range since are
// loaded once per group and new checkpoint, for every caller, and an entry
// whose bucket they do not name is extended without a query. Only buckets
// that changed, or whose range is unknown, are summed, over just the ops
// since the entry's "until" (a primary key range probe per bucket).
//
// Use one cache per process, shared by every sync connection: all misses of
// one Checksums call are fetched in one query, and a bucket that several
// callers miss at the same checkpoint is fetched once, the others waiting
// for that fetch. A query also sums the other cached buckets the change
// records name (companions), so that connections that each hold buckets of
// their own do not each send a query at every checkpoint. So a new
// checkpoint costs one change record query plus, at most, one checksum
// query per changed bucket — mostly one in all — whatever the number of
// connections. It is safe for concurrent use.
//
// Compaction: a MOVE keeps its original checksum, so sums are unchanged. A
// CLEAR op (op 4) replaces all of a bucket's ops up to it and holds their
// sum, so a range that contains a CLEAR yields the bucket's full state and
// replaces the cached base instead of adding to it. Neither changes a
// bucket's state at a checkpoint at or after it, so neither invalidates
// an entry or its extension.
type ChecksumCache struct {
	s    *Reader
	size int
	// noChanges: ignore change records (DisableChangeRecords).
	noChanges bool

	mu  sync.Mutex
	lru lruList // every entry, most recently used first
	// byBucket holds, per group, each bucket's newest entry; its older
	// entries hang from it (cacheEntry.older), descending by checkpoint.
	// A map per group, keyed by the name alone, has smaller slots (24
	// bytes, not 32) than one keyed by bucketKey and, measured, about 20
	// bytes less per bucket; a process serves a group or two.
	byBucket map[int]map[string]*cacheEntry
	inflight map[cacheKey]*flight
	logs     map[int]*changeLog // per group

	queries, hits, misses, shared, opsSummed, carried, changeQueries, prefetched, advanced atomic.Int64
	examined                                                                               int64 // buckets companions looked at; c.mu guards it

	// beforeFetch, when set by tests, runs before each checksum query.
	beforeFetch func()
}

// bucketKey names a bucket of a sync rules group.
type bucketKey struct {
	group  int
	bucket string
}

// cacheKey names a bucket's entry at a checkpoint (and a fetch of it).
type cacheKey struct {
	bucketKey
	cp int64
}

// cacheEntry is a bucket's checksum and op count at every checkpoint in
// [cp, until], and its links in the cache's two lists: the LRU and its
// bucket's chain.
//
// The lists are intrusive, one allocation (96 bytes) per entry, because
// the cache holds every sync connection's buckets: 50,000 and more at
// 1,000 connections of 50 buckets each. A container/list Element, the
// entry behind its interface, and a map slot and a slice per bucket cost
// 193–233 bytes per cached bucket; this costs 130–148
// (TestChecksumCacheBytesPerBucket; the range is the maps' growth). A
// library LRU (hashicorp/golang-lru) holds one value per key, without the
// per-bucket chain ordered by checkpoint that nearest walks.
type cacheEntry struct {
	bucketKey // the byBucket key, to unlink the entry when it is evicted
	cp, until int64
	count     int64
	sum       uint32

	prev, next   *cacheEntry // in the LRU ring (lruList)
	older, newer *cacheEntry // the bucket's entries at the next lower and higher checkpoints
}

// lruList is a ring of entries through their prev and next links, most
// recently used first, around a sentinel (root) so that no link is nil
// (as in container/list). Call init before use; c.mu guards it.
type lruList struct {
	root cacheEntry
	n    int
}

// init makes l the empty ring.
func (l *lruList) init() { l.root.prev, l.root.next, l.n = &l.root, &l.root, 0 }

// len is the number of entries in l.
func (l *lruList) len() int { return l.n }

// back returns the least recently used entry, or nil when l is empty.
func (l *lruList) back() *cacheEntry {
	if l.n == 0 {
		return nil
	}
	return l.root.prev
}

// pushFront adds e, not in l, as the most recently used entry.
func (l *lruList) pushFront(e *cacheEntry) {
	e.prev, e.next = &l.root, l.root.next
	e.prev.next, e.next.prev = e, e
	l.n++
}

// remove takes e, in l, out of l.
func (l *lruList) remove(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil // an evicted entry holds no neighbour alive
	l.n--
}

// moveToFront makes e, in l, the most recently used entry.
func (l *lruList) moveToFront(e *cacheEntry) {
	if l.root.next == e {
		return
	}
	l.remove(e)
	l.pushFront(e)
}

// flight is one bucket's fetch in progress; done closes when res or err is
// set.
type flight struct {
	done  chan struct{}
	sum   uint32
	count int64
	err   error
}

// awaitOther waits for another caller's work (done closes, then err tells
// how it ended). It returns retry when that work ended only because its
// caller's context did: the result is not known, ours should do the work
// again. With our own context ended, that is the error.
func awaitOther(ctx context.Context, done <-chan struct{}, err *error) (retry bool, _ error) {
	select {
	case <-done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	switch e := *err; {
	case e == nil:
		return false, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(e, context.Canceled) || errors.Is(e, context.DeadlineExceeded):
		return true, nil
	default:
		return false, e
	}
}

// NewChecksumCache returns a cache holding at most size (bucket,
// checkpoint) entries (default 100000 when size ≤ 0). A bucket's first
// entry is about 140 bytes, each further one 96; the bucket name is the
// caller's string, not a copy.
func (s *Reader) NewChecksumCache(size int) *ChecksumCache {
	if size <= 0 {
		size = 100000
	}
	c := &ChecksumCache{s: s, size: size, byBucket: map[int]map[string]*cacheEntry{},
		inflight: map[cacheKey]*flight{}, logs: map[int]*changeLog{}}
	c.lru.init()
	return c
}

// DisableChangeRecords makes the cache ignore change records: every bucket
// asked at a checkpoint above its entry is summed from that entry on, as
// before change records existed. It is the benchmarks' baseline; call it
// before the cache is used.
func (c *ChecksumCache) DisableChangeRecords() { c.noChanges = true }

// ChecksumStats are a ChecksumCache's counters since it was created.
type ChecksumStats struct {
	// Queries is the number of checksum queries sent to storage.
	Queries int64
	// Hits counts buckets answered from a valid entry; Carried counts
	// buckets whose entry change records extended to the asked checkpoint
	// (no query); Misses counts buckets summed by the caller's query (the
	// "buckets summed"); Shared counts buckets a caller waited for because
	// another caller was already summing them.
	Hits, Carried, Misses, Shared int64
	// OpsSummed is the number of ops the fetched ranges covered: with
	// incremental fetches it is the number of ops written since the cached
	// checkpoints, not the buckets' sizes.
	OpsSummed int64
	// ChangeQueries is the number of change record queries (at most one
	// per group and new checkpoint).
	ChangeQueries int64
	// Prefetched counts buckets summed for other callers: changed buckets
	// a query summed along with its caller's misses (see companions).
	Prefetched int64
	// Advanced counts entries made from a caller's sums of a range's ops
	// (Advance) rather than by a query.
	Advanced int64
	// Entries is the number of cached (bucket, checkpoint) entries.
	Entries int
}

// Stats returns the cache's counters.
func (c *ChecksumCache) Stats() ChecksumStats {
	c.mu.Lock()
	n := c.lru.len()
	c.mu.Unlock()
	return ChecksumStats{Queries: c.queries.Load(), Hits: c.hits.Load(), Carried: c.carried.Load(),
		Misses: c.misses.Load(), Shared: c.shared.Load(), OpsSummed: c.opsSummed.Load(),
		ChangeQueries: c.changeQueries.Load(), Prefetched: c.prefetched.Load(), Advanced: c.advanced.Load(), Entries: n}
}

// fetch is one bucket a Checksums call fetches itself.
type fetch struct {
	key       cacheKey
	f         *flight
	base      int64 // the range is (base, checkpoint]
	baseSum   uint32
	baseCount int64
}

// nearest returns bk's entry with the greatest checkpoint ≤ cp, or nil.
// c.mu must be held.
func (c *ChecksumCache) nearest(bk bucketKey, cp int64) *cacheEntry {
	e, _ := c.position(bk, cp)
	return e
}

// position returns where an entry of bk at cp belongs in bk's chain: at
// is the entry with the greatest checkpoint ≤ cp (nil if none), newer the
// one above it (nil if at is, or would be, the newest). The walk starts
// at the newest entry because callers ask at the latest checkpoint, or
// store an entry for it, nearly always: then it ends there, where a
// binary search over a slice per bucket cost a slice per bucket. c.mu
// must be held.
func (c *ChecksumCache) position(bk bucketKey, cp int64) (at, newer *cacheEntry) {
	at = c.newest(bk)
	for at != nil && at.cp > cp {
		newer, at = at, at.older
	}
	return at, newer
}

// Checksums returns the checksum and op count of each bucket of group at
// checkpoint, in the order of buckets; buckets without ops are 0/0.
// checkpoint must be a published checkpoint of group (the cache assumes
// the ops at or below it never change, except by compaction, which keeps
// sums). It issues at most one change record query (shared with every
// concurrent caller) and one checksum query, for the buckets that changed
// since their entry and that no other caller is fetching, and waits for
// those that are.
func (c *ChecksumCache) Checksums(ctx context.Context, group int, checkpoint int64, buckets []string) ([]BucketChecksum, error) {
	if !c.noChanges {
		if from, ok := c.oldestStale(group, checkpoint, buckets); ok {
			if err := c.ensureLog(ctx, group, from, checkpoint); err != nil {
				return nil, err
			}
		}
	}
	out := make([]BucketChecksum, len(buckets))
	pending := make([]int, len(buckets))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		var fetches []fetch
		type wait struct {
			i int
			f *flight
		}
		var waits []wait
		c.mu.Lock()
		for _, i := range pending {
			k := cacheKey{bucketKey{group, buckets[i]}, checkpoint}
			out[i].Bucket = buckets[i]
			e := c.nearest(k.bucketKey, checkpoint)
			if e != nil {
				if e.until >= checkpoint {
					c.lru.moveToFront(e)
					out[i].Checksum, out[i].Count = e.sum, e.count
					c.hits.Add(1)
					continue
				}
			}
			if f, ok := c.inflight[k]; ok {
				waits = append(waits, wait{i, f})
				c.shared.Add(1)
				continue
			}
			if e != nil && !c.noChanges && c.unchanged(group, buckets[i], e.until, checkpoint) {
				e.until = checkpoint
				c.lru.moveToFront(e)
				out[i].Checksum, out[i].Count = e.sum, e.count
				c.carried.Add(1)
				continue
			}
			f := &flight{done: make(chan struct{})}
			c.inflight[k] = f
			waits = append(waits, wait{i, f})
			fe := fetch{key: k, f: f}
			if e != nil {
				// Sum only what came after the entry's validity.
				fe.base, fe.baseSum, fe.baseCount = e.until, e.sum, e.count
			}
			fetches = append(fetches, fe)
			c.misses.Add(1)
		}
		if len(fetches) > 0 && !c.noChanges {
			fetches = c.companions(group, checkpoint, fetches)
		}
		c.mu.Unlock()

		if len(fetches) > 0 {
			c.fetch(ctx, group, checkpoint, fetches)
		}
		pending = pending[:0]
		for _, w := range waits {
			retry, err := awaitOther(ctx, w.f.done, &w.f.err)
			if err != nil {
				return nil, err
			}
			if retry {
				pending = append(pending, w.i)
				continue
			}
			out[w.i].Checksum, out[w.i].Count = w.f.sum, w.f.count
		}
	}
	return out, nil
}

// maxCompanions bounds the buckets one checksum query sums for other
// callers (see companions).
const maxCompanions = 4096

// companions adds to fetches, the misses of one Checksums call at
// checkpoint, the other cached buckets of group that the change records
// name as changed up to checkpoint and that nobody is fetching: with many
// connections each holding buckets of its own, every one of them would
// otherwise run a query of its own for its few changed buckets at every
// checkpoint, where one query sums them all. Their results are cached, and
// their callers find them there (or wait for this query). Only buckets
// with an entry — someone asked for them before — are summed, from that
// entry on. c.mu must be held.
func (c *ChecksumCache) companions(group int, checkpoint int64, fetches []fetch) []fetch {
	l := c.logs[group]
	if l == nil || len(l.ivs) == 0 || l.ivs[len(l.ivs)-1].to < checkpoint {
		return fetches
	}
	// Intervals before the oldest range fetched name buckets whose
	// entries are newer than their change, mostly: not worth a look.
	// A fetch without an entry (base 0) says nothing about where the
	// callers are.
	since := checkpoint
	for _, fe := range fetches {
		if fe.base > 0 {
			since = min(since, fe.base)
		}
	}
	added := 0
	for i := len(l.ivs) - 1; i >= 0 && l.ivs[i].to > since && added < maxCompanions; i-- {
		iv := l.ivs[i]
		if iv.from >= checkpoint || iv.prefetchedFor >= min(checkpoint, iv.to) {
			// After the checkpoint, or looked through already: at this
			// checkpoint, or at one the whole interval is below. Then each
			// of its buckets with an entry got one at or past the
			// interval's end (or was in flight to get one), so a later
			// checkpoint finds nothing to add here. Without the second
			// rule every new checkpoint walked the whole log again as far
			// back as its oldest caller: with 1,000 streams, 23 % of the
			// process's CPU under the cache's lock.
			continue
		}
		iv.prefetchedFor = checkpoint
		for b := range iv.buckets {
			c.examined++
			if added == maxCompanions {
				iv.prefetchedFor = 0 // not every bucket was looked at
				break
			}
			k := cacheKey{bucketKey{group, b}, checkpoint}
			if _, ok := c.inflight[k]; ok {
				continue
			}
			e := c.nearest(k.bucketKey, checkpoint)
			if e == nil {
				continue
			}
			if e.until >= checkpoint || e.until >= iv.to || e.until < l.ivs[0].from {
				// Valid already, changed before its entry, or from before
				// the log (its own caller sums it).
				continue
			}
			f := &flight{done: make(chan struct{})}
			c.inflight[k] = f
			fetches = append(fetches, fetch{key: k, f: f, base: e.until, baseSum: e.sum, baseCount: e.count})
			c.prefetched.Add(1)
			added++
		}
	}
	return fetches
}

// checksumRangeSQL sums each requested bucket's ops in (start, $3]: one
// primary key range scan per bucket, which finds nothing, cheaply, for a
// bucket without new ops. It reports whether the range holds a CLEAR. It
// is a template (see newLayout).
const checksumRangeSQL = `
SELECT r.i, s.total, s.n, s.has_clear
FROM unnest($2::{btype}[], $4::int8[]) WITH ORDINALITY AS r(bucket, start, i)
CROSS JOIN LATERAL (
  SELECT coalesce(sum(d.checksum) % 4294967296, 0)::int8 AS total, count(*) AS n,
         coalesce(bool_or(d.op = 4), false) AS has_clear
  FROM {ops} d
  WHERE d.group_id = $1 AND d.{bucket} = r.bucket AND d.op_id > r.start AND d.op_id <= $3) s`

// fetch runs one query for all of fetches, then completes their flights
// and caches the results.
func (c *ChecksumCache) fetch(ctx context.Context, group int, checkpoint int64, fetches []fetch) {
	// Sum in bucket name order, the order the snapshot writes each
	// chunk's ops in (Writer): the next bucket's runs share heap pages
	// with the previous one's, which are still in shared buffers; in the
	// caller's order a storage larger than shared buffers reads a page per
	// run (see syncapi's sendData).
	slices.SortFunc(fetches, func(a, b fetch) int { return strings.Compare(a.key.bucket, b.key.bucket) })
	names := make([]string, len(fetches))
	starts := make([]int64, len(fetches))
	for i, fe := range fetches {
		names[i], starts[i] = fe.key.bucket, fe.base
	}
	type partial struct {
		sum   uint32
		count int64
		clear bool
		ok    bool
	}
	parts := make([]partial, len(fetches))
	c.queries.Add(1)
	if c.beforeFetch != nil {
		c.beforeFetch()
	}
	err := func() error {
		lay, err := c.s.layout(ctx, group)
		if err != nil {
			return err
		}
		buckets, err := c.s.bucketArg(ctx, lay, group, names)
		if err != nil {
			return err
		}
		rows, err := c.s.pool.Query(ctx, lay.checksumRange, group, buckets, checkpoint, starts)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i, total, n int64
			var clear bool
			if err := rows.Scan(&i, &total, &n, &clear); err != nil {
				return err
			}
			if i < 1 || int(i) > len(parts) {
				return fmt.Errorf("bucket number %d out of range", i)
			}
			parts[i-1] = partial{checksum.FromInt64(total), n, clear, true}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// A group taken over is cleared: sums read once that began would
		// be cached, and announced, short of the ops they stand for.
		return c.s.stillServing(ctx, group)
	}()
	if err == nil {
		for i := range parts {
			if !parts[i].ok {
				err = fmt.Errorf("no checksum row for bucket %q", names[i])
				break
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("bucket checksums of group %d at %d: %w", group, checkpoint, err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for i, fe := range fetches {
		delete(c.inflight, fe.key)
		if err != nil {
			fe.f.err = err
			close(fe.f.done)
			continue
		}
		p := parts[i]
		c.opsSummed.Add(p.count)
		if p.clear {
			// A CLEAR replaced everything before it: the range is the
			// bucket's full state.
			fe.f.sum, fe.f.count = p.sum, p.count
		} else {
			fe.f.sum, fe.f.count = checksum.Add(fe.baseSum, p.sum), fe.baseCount+p.count
		}
		close(fe.f.done)
		c.store(fe.key, fe.f.sum, fe.f.count)
	}
}

// store caches one entry, valid at k.cp, and evicts the least recently
// used ones beyond the size. An entry already cached at k.cp is kept as
// it is (only marked used). c.mu must be held.
func (c *ChecksumCache) store(k cacheKey, sum uint32, count int64) {
	at, newer := c.position(k.bucketKey, k.cp)
	if at != nil && at.cp == k.cp {
		c.lru.moveToFront(at)
		return
	}
	// The key keeps the caller's bucket name, not a copy: the cache's
	// callers hold their names anyway.
	e := &cacheEntry{bucketKey: k.bucketKey, cp: k.cp, until: k.cp, sum: sum, count: count}
	c.link(e, at, newer)
	c.lru.pushFront(e)
	for c.lru.len() > c.size {
		old := c.lru.back()
		c.lru.remove(old)
		c.unlink(old)
	}
}

// newest returns bk's entry at the highest checkpoint, or nil. c.mu must
// be held.
func (c *ChecksumCache) newest(bk bucketKey) *cacheEntry {
	return c.byBucket[bk.group][bk.bucket]
}

// setNewest makes e the head of its bucket's chain. c.mu must be held.
func (c *ChecksumCache) setNewest(e *cacheEntry) {
	m := c.byBucket[e.group]
	if m == nil {
		m = map[string]*cacheEntry{}
		c.byBucket[e.group] = m
	}
	m[e.bucket] = e
}

// forget drops bk, whose last entry is gone, and its group's map with its
// last bucket. c.mu must be held.
func (c *ChecksumCache) forget(bk bucketKey) {
	m := c.byBucket[bk.group]
	delete(m, bk.bucket)
	if len(m) == 0 {
		delete(c.byBucket, bk.group)
	}
}

// link puts e into its bucket's chain between at (older, or nil) and
// newer (or nil: e is the newest), as position returned them. c.mu must
// be held.
func (c *ChecksumCache) link(e, at, newer *cacheEntry) {
	e.older, e.newer = at, newer
	if at != nil {
		at.newer = e
	}
	if newer != nil {
		newer.older = e
	} else {
		c.setNewest(e)
	}
}

// unlink takes e out of its bucket's chain, and the bucket out of
// byBucket with its last entry. c.mu must be held.
func (c *ChecksumCache) unlink(e *cacheEntry) {
	if e.older != nil {
		e.older.newer = e.newer
	}
	switch {
	case e.newer != nil:
		e.newer.older = e.older
	case e.older != nil:
		c.setNewest(e.older)
	default:
		c.forget(e.bucketKey)
	}
	e.older, e.newer = nil, nil
}

// BucketDelta is what a bucket's ops in a range of op ids add up to: the
// sum of their checksums and their number, and whether one of them is a
// CLEAR (which replaces everything before it, so the range alone is not
// an increment).
type BucketDelta struct {
	Bucket   string
	Checksum uint32
	Count    int64
	Clear    bool
}

// Advance caches each bucket's state at checkpoint to from its state at
// from and deltas, the complete sums of its ops in (from, to] — a caller
// that read those ops anyway (a sync API's shared read of a checkpoint's
// new ops) saves the checksum query every stream would otherwise cause.
// Only buckets with an entry valid at from (by itself or by the change
// records) move; a delta with a CLEAR is
// skipped (its caller sums the bucket afresh). to must be a published
// checkpoint.
func (c *ChecksumCache) Advance(group int, from, to int64, deltas []BucketDelta) {
	if from >= to {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range deltas {
		if d.Clear {
			continue
		}
		bk := bucketKey{group, d.Bucket}
		e := c.nearest(bk, from)
		if e == nil {
			continue
		}
		if e.until < from && (c.noChanges || !c.unchanged(group, d.Bucket, e.until, from)) {
			continue // not known to hold at from
		}
		if _, ok := c.inflight[cacheKey{bk, to}]; ok {
			continue // its fetcher stores it
		}
		c.advanced.Add(1)
		c.store(cacheKey{bk, to}, checksum.Add(e.sum, d.Checksum), e.count+d.Count)
	}
}
