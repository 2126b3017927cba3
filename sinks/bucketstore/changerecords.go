package bucketstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Change records: every write transaction also inserts one bucket_changes
// row naming the buckets its ops went to and the parameter lookups it
// wrote, with the range of op ids it used. A checkpoint C commits every op
// id ≤ C, and each op commits together with its record, so the records
// whose range overlaps (A, C] name every bucket and lookup that changed
// between checkpoints A and C (and perhaps a few more: a range is an upper
// bound, which only costs a needless query). The checksum cache and the
// sync API use that to skip work for what did not change.
//
// Snapshot batches record NULL ("unknown") instead of their buckets: they
// normally all precede the group's first checkpoint, where no reader has
// anything cached, so naming their buckets would cost every snapshot row a
// set insertion for nothing. A snapshot that runs after the first
// checkpoint (a table added later) makes its checkpoint range unknown,
// which readers treat as "everything may have changed" — the query they
// would have run without records. The cost on the snapshot path is one
// small INSERT per batch.
//
// Retention: Commit deletes the records whose op_high is below the new
// checkpoint minus Writes.changeRetention op ids and raises the group's
// changes_from to that horizon in the same transaction. Readers read
// changes_from together with the records (one statement) and treat a
// range that starts below it as unknown, so pruning can never make a
// reader miss a change: a cache entry older than the horizon just gets the
// range query it would have got without records.

// defaultChangeRetention is how many op ids (of the global sequence) back
// from the newest checkpoint change records are kept. Cache entries move
// forward with every checkpoint they are asked at, so readers normally
// need only the last interval; this keeps minutes of history at a typical
// rate, and at most one row per write transaction in that window. Every
// write takes at least one block of opIDBlock ids, so this is at least the
// last 10,000 writes.
const defaultChangeRetention = 1_000_000

// maxRecordedNames bounds the bucket and lookup names one record lists;
// a transaction touching more records NULL (unknown) instead, which keeps
// records and the readers' in-memory sets small under bulk writes.
const maxRecordedNames = 10_000

// changeRecord collects the buckets and lookups one write transaction
// touches. The zero value records nothing until reset.
type changeRecord struct {
	exact   bool // false: record unknown (snapshot batches, too many names)
	buckets map[string]struct{}
	names   []string
	lookups map[string]struct{}
	keys    [][]byte
}

// reset starts a new transaction's record: exact lists the names, !exact
// records "unknown".
func (r *changeRecord) reset(exact bool) {
	r.exact = exact
	clear(r.buckets)
	clear(r.lookups)
	r.names = r.names[:0]
	r.keys = r.keys[:0]
}

// bucket notes an op written to bucket.
func (r *changeRecord) bucket(bucket string) {
	if !r.exact {
		return
	}
	// Consecutive ops of a batch often share a bucket: skip the map then.
	if n := len(r.names); n > 0 && r.names[n-1] == bucket {
		return
	}
	if _, ok := r.buckets[bucket]; ok {
		return
	}
	if r.buckets == nil {
		r.buckets = map[string]struct{}{}
	}
	r.buckets[bucket] = struct{}{}
	r.names = append(r.names, bucket)
	r.exact = len(r.names) <= maxRecordedNames // past it, stop collecting: "unknown"
}

// lookup notes a parameter entry written under key.
func (r *changeRecord) lookup(key []byte) {
	if !r.exact {
		return
	}
	if _, ok := r.lookups[string(key)]; ok {
		return
	}
	if r.lookups == nil {
		r.lookups = map[string]struct{}{}
	}
	r.lookups[string(key)] = struct{}{}
	r.keys = append(r.keys, key)
	r.exact = len(r.keys) <= maxRecordedNames
}

const recordChangesSQL = `INSERT INTO bucket_changes (group_id, op_low, op_high, buckets, lookups) VALUES ($1, $2, $3, $4, $5)`

// recordChanges queues the insert of the transaction's change record on
// tail; a write without ops or parameter entries needs none.
func (w *Writer) recordChanges(tail *pgx.Batch, res *Result) {
	if res.Ops+res.Params == 0 || len(w.ids) == 0 {
		return
	}
	r := &w.changed
	// An empty array is "none"; nil is NULL, "unknown".
	buckets, lookups := []string{}, [][]byte{}
	switch {
	case r.exact:
		if len(r.names) > 0 {
			buckets = r.names
		}
		if len(r.keys) > 0 {
			lookups = r.keys
		}
	default:
		if res.Ops > 0 {
			buckets = nil
		}
		if res.Params > 0 {
			lookups = nil
		}
	}
	// Ids are drawn ascending and used from the first on.
	tail.Queue(recordChangesSQL, w.group, w.ids[0], res.MaxOpID, buckets, lookups)
}

// pruneChangesSQL deletes records no longer needed and raises the group's
// completeness horizon, atomically, only when it deleted something.
const pruneChangesSQL = `
WITH gone AS (DELETE FROM bucket_changes WHERE group_id = $1 AND op_high <= $2 RETURNING 1)
UPDATE groups SET changes_from = GREATEST(changes_from, $2) WHERE id = $1 AND EXISTS (SELECT 1 FROM gone)`

// queuePrune queues pruning on Commit's tail when a checkpoint at cp is
// published. Commit holds the group row lock, which writers wait for, so
// it prunes only every changeRetention/8 op ids (per process: another
// process pruning too is harmless), not at every checkpoint.
func (s *Writes) queuePrune(tail *pgx.Batch, group int, cp int64) {
	horizon := cp - s.changeRetention
	if horizon <= 0 {
		return
	}
	if next, ok := s.pruneNext.Load(group); ok && horizon < next.(int64) {
		return
	}
	tail.Queue(pruneChangesSQL, group, horizon)
	// Should the transaction roll back, the next prune just comes later.
	s.pruneNext.Store(group, horizon+max(s.changeRetention/8, 1))
}

// loadChangesSQL reads the group's state, its completeness horizon and
// every record whose op id range overlaps ($2, $3]. The LEFT JOIN yields
// one row even without records; a missing group yields none. The state
// is read in the same statement, not after it (as Validity is): a
// takeover's clearing deletes records row by row (MVCC, never TRUNCATE),
// after the stop commits, so a snapshot that sees the group serving sees
// none of those deletions.
const loadChangesSQL = `
SELECT g.state, g.changes_from, c.op_low IS NOT NULL, c.buckets IS NULL, c.buckets, c.lookups IS NULL, c.lookups
FROM groups g
LEFT JOIN bucket_changes c ON c.group_id = g.id AND c.op_high > $2 AND c.op_low <= $3
WHERE g.id = $1`

// changeInterval is what changed in a group between two checkpoints
// (from, to]. Once built it is never modified.
type changeInterval struct {
	from, to int64
	// allBuckets / allLookups: unknown, anything may have changed.
	allBuckets, allLookups bool
	buckets                map[string]struct{}
	lookups                map[string]struct{}
	// filter holds buckets' names, when they are known (allBuckets false).
	filter *bucketFilter
	// prefetchedFor is the newest checkpoint the checksum cache summed
	// this interval's cached buckets at (ChecksumCache.companions);
	// guarded by the cache's mutex.
	prefetchedFor int64
}

// hasBucket reports whether bucket may have changed in the interval.
func (iv *changeInterval) hasBucket(bucket string) bool {
	_, ok := iv.buckets[bucket]
	return ok || iv.allBuckets
}

// hasLookup reports whether the lookup key may have got an entry or a
// retraction in the interval.
func (iv *changeInterval) hasLookup(key []byte) bool {
	_, ok := iv.lookups[string(key)]
	return ok || iv.allLookups
}

// loadChanges reads the change records of group over (from, to]. to must
// be a published checkpoint: then every record overlapping the range is
// committed (see the checkpoint invariant in doc.go).
func (s *Reader) loadChanges(ctx context.Context, group int, from, to int64) (*changeInterval, error) {
	iv := &changeInterval{from: from, to: to, buckets: map[string]struct{}{}, lookups: map[string]struct{}{}}
	rows, err := s.pool.Query(ctx, loadChangesSQL, group, from, to)
	if err != nil {
		return nil, fmt.Errorf("change records of group %d in (%d, %d]: %w", group, from, to, err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var state State
		var changesFrom int64
		var some, nullBuckets, nullLookups bool
		var buckets []string
		var lookups [][]byte
		if err := rows.Scan(&state, &changesFrom, &some, &nullBuckets, &buckets, &nullLookups, &lookups); err != nil {
			return nil, fmt.Errorf("change records of group %d: %w", group, err)
		}
		if !(Group{State: state}).Serving() {
			// Taken over and cleared, or about to be: records read from
			// now on may miss changes (see Validity.Serving).
			return nil, fmt.Errorf("change records of group %d: %w", group, ErrGroupStopped)
		}
		found = true
		if from < changesFrom {
			iv.allBuckets, iv.allLookups = true, true
		}
		if !some {
			continue
		}
		iv.allBuckets = iv.allBuckets || nullBuckets
		iv.allLookups = iv.allLookups || nullLookups
		if !iv.allBuckets {
			for _, b := range buckets {
				iv.buckets[b] = struct{}{}
			}
		}
		if !iv.allLookups {
			for _, k := range lookups {
				iv.lookups[string(k)] = struct{}{}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("change records of group %d: %w", group, err)
	}
	if !found {
		iv.allBuckets, iv.allLookups = true, true
	}
	iv.index()
	return iv, nil
}

// index makes the interval ready to answer: sets too large to be worth
// holding are as good as unknown, and known buckets go in the filter.
func (iv *changeInterval) index() {
	if iv.allBuckets || len(iv.buckets) > maxRecordedNames {
		iv.allBuckets, iv.buckets = true, nil
	}
	if iv.allLookups || len(iv.lookups) > maxRecordedNames {
		iv.allLookups, iv.lookups = true, nil
	}
	if !iv.allBuckets {
		iv.filter = new(bucketFilter)
		for b := range iv.buckets {
			iv.filter.add(BucketHash(b))
		}
	}
}
