package bucketstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
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

// ChecksumCache serves bucket checksums at checkpoints from an LRU keyed by
// (group, bucket, checkpoint). On a miss it sums only the ops since the
// nearest earlier checkpoint it has cached for that bucket, so a new
// checkpoint costs a primary key range probe per bucket over the ops
// written since, which is empty for unchanged buckets.
//
// Use one cache per process, shared by every sync connection: all misses of
// one Checksums call are fetched in one query, and a bucket that several
// callers miss at the same checkpoint is fetched once, the others waiting
// for that fetch. It is safe for concurrent use.
//
// Compaction: a MOVE keeps its original checksum, so sums are unchanged. A
// CLEAR op (op 4) replaces all of a bucket's ops up to it and holds their
// sum, so a range that contains a CLEAR yields the bucket's full state and
// replaces the cached base instead of adding to it.
type ChecksumCache struct {
	s    *Store
	size int

	mu       sync.Mutex
	lru      *list.List // of *cacheEntry, most recent first
	entries  map[cacheKey]*list.Element
	byBucket map[bucketKey][]int64 // cached checkpoints per bucket, ascending
	inflight map[cacheKey]*flight

	queries, hits, misses, shared, opsSummed atomic.Int64

	// beforeFetch, when set by tests, runs before each query.
	beforeFetch func()
}

type bucketKey struct {
	group  int
	bucket string
}

type cacheKey struct {
	bucketKey
	cp int64
}

type cacheEntry struct {
	key   cacheKey
	sum   uint32
	count int64
}

// flight is one bucket's fetch in progress; done closes when res or err is
// set.
type flight struct {
	done  chan struct{}
	sum   uint32
	count int64
	err   error
}

// NewChecksumCache returns a cache holding at most size (bucket,
// checkpoint) entries (default 100000 when size ≤ 0). An entry is about
// 150 bytes plus the bucket name.
func (s *Store) NewChecksumCache(size int) *ChecksumCache {
	if size <= 0 {
		size = 100000
	}
	return &ChecksumCache{s: s, size: size, lru: list.New(), entries: map[cacheKey]*list.Element{},
		byBucket: map[bucketKey][]int64{}, inflight: map[cacheKey]*flight{}}
}

// ChecksumStats are a ChecksumCache's counters since it was created.
type ChecksumStats struct {
	// Queries is the number of checksum queries sent to storage.
	Queries int64
	// Hits and Misses count buckets answered from the cache and fetched by
	// the caller; Shared counts buckets a caller waited for because another
	// caller was already fetching them.
	Hits, Misses, Shared int64
	// OpsSummed is the number of ops the fetched ranges covered: with
	// incremental fetches it is the number of ops written since the cached
	// checkpoints, not the buckets' sizes.
	OpsSummed int64
	// Entries is the number of cached (bucket, checkpoint) entries.
	Entries int
}

// Stats returns the cache's counters.
func (c *ChecksumCache) Stats() ChecksumStats {
	c.mu.Lock()
	n := c.lru.Len()
	c.mu.Unlock()
	return ChecksumStats{Queries: c.queries.Load(), Hits: c.hits.Load(), Misses: c.misses.Load(),
		Shared: c.shared.Load(), OpsSummed: c.opsSummed.Load(), Entries: n}
}

// fetch is one bucket a Checksums call fetches itself.
type fetch struct {
	key       cacheKey
	f         *flight
	base      int64 // the range is (base, checkpoint]
	baseSum   uint32
	baseCount int64
}

// Checksums returns the checksum and op count of each bucket of group at
// checkpoint, in the order of buckets; buckets without ops are 0/0.
// checkpoint must be a published checkpoint of group (the cache assumes
// the ops at or below it never change, except by compaction, which keeps
// sums). It issues at most one query, for the buckets neither cached nor
// being fetched by another caller, and waits for those that are.
func (c *ChecksumCache) Checksums(ctx context.Context, group int, checkpoint int64, buckets []string) ([]BucketChecksum, error) {
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
			if el, ok := c.entries[k]; ok {
				c.lru.MoveToFront(el)
				e := el.Value.(*cacheEntry)
				out[i].Checksum, out[i].Count = e.sum, e.count
				c.hits.Add(1)
				continue
			}
			if f, ok := c.inflight[k]; ok {
				waits = append(waits, wait{i, f})
				c.shared.Add(1)
				continue
			}
			f := &flight{done: make(chan struct{})}
			c.inflight[k] = f
			waits = append(waits, wait{i, f})
			fe := fetch{key: k, f: f}
			if cps := c.byBucket[k.bucketKey]; len(cps) > 0 {
				// The nearest cached checkpoint below the requested one.
				if j, _ := slices.BinarySearch(cps, checkpoint); j > 0 {
					fe.base = cps[j-1]
					e := c.entries[cacheKey{k.bucketKey, fe.base}].Value.(*cacheEntry)
					fe.baseSum, fe.baseCount = e.sum, e.count
				}
			}
			fetches = append(fetches, fe)
			c.misses.Add(1)
		}
		c.mu.Unlock()

		if len(fetches) > 0 {
			c.fetch(ctx, group, checkpoint, fetches)
		}
		pending = pending[:0]
		for _, w := range waits {
			select {
			case <-w.f.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if w.f.err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if !errors.Is(w.f.err, context.Canceled) && !errors.Is(w.f.err, context.DeadlineExceeded) {
					return nil, w.f.err
				}
				// Another caller's fetch ended with its context: fetch again.
				pending = append(pending, w.i)
				continue
			}
			out[w.i].Checksum, out[w.i].Count = w.f.sum, w.f.count
		}
	}
	return out, nil
}

// checksumRangeSQL sums each requested bucket's ops in (start, $3]: one
// primary key range scan per bucket, which finds nothing, cheaply, for a
// bucket without new ops. It reports whether the range holds a CLEAR.
const checksumRangeSQL = `
SELECT r.i, s.total, s.n, s.has_clear
FROM unnest($2::text[], $4::int8[]) WITH ORDINALITY AS r(bucket, start, i)
CROSS JOIN LATERAL (
  SELECT coalesce(sum(d.checksum) % 4294967296, 0)::int8 AS total, count(*) AS n,
         coalesce(bool_or(d.op = 4), false) AS has_clear
  FROM bucket_data d
  WHERE d.group_id = $1 AND d.bucket_name = r.bucket AND d.op_id > r.start AND d.op_id <= $3) s`

// fetch runs one query for all of fetches, then completes their flights
// and caches the results.
func (c *ChecksumCache) fetch(ctx context.Context, group int, checkpoint int64, fetches []fetch) {
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
		rows, err := c.s.pool.Query(ctx, checksumRangeSQL, group, names, checkpoint, starts)
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
		return rows.Err()
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

// store caches one entry and evicts the least recently used ones beyond
// the size. c.mu must be held.
func (c *ChecksumCache) store(k cacheKey, sum uint32, count int64) {
	if el, ok := c.entries[k]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.entries[k] = c.lru.PushFront(&cacheEntry{key: k, sum: sum, count: count})
	cps := c.byBucket[k.bucketKey]
	j, _ := slices.BinarySearch(cps, k.cp)
	c.byBucket[k.bucketKey] = slices.Insert(cps, j, k.cp)
	for c.lru.Len() > c.size {
		old := c.lru.Remove(c.lru.Back()).(*cacheEntry)
		delete(c.entries, old.key)
		cps := c.byBucket[old.key.bucketKey]
		if j, found := slices.BinarySearch(cps, old.key.cp); found {
			cps = slices.Delete(cps, j, j+1)
		}
		if len(cps) == 0 {
			delete(c.byBucket, old.key.bucketKey)
		} else {
			c.byBucket[old.key.bucketKey] = cps
		}
	}
}
