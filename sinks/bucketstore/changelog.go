package bucketstore

import (
	"context"
	"fmt"
	"slices"
)

// maxLogIntervals bounds the change intervals a cache keeps per group.
// Entries move forward with every checkpoint they are asked at, so readers
// need the last interval or two; older ones only help entries of buckets
// nobody asked for in a while, which then get a range query instead.
const maxLogIntervals = 64

// changeLog is a cache's in-memory view of one group's change records: a
// contiguous run of intervals (from, to], ascending, each loaded once for
// all callers. c.mu guards it.
type changeLog struct {
	ivs     []*changeInterval
	loading *logFlight // the load in progress, if any
}

// logFlight is a change record load in progress; done closes when err is
// set.
type logFlight struct {
	done chan struct{}
	err  error
}

func (l *changeLog) covers(from, to int64) bool {
	return len(l.ivs) > 0 && l.ivs[0].from <= from && l.ivs[len(l.ivs)-1].to >= to
}

// overlapping calls f for each interval overlapping (from, to] until f
// returns false; it reports whether the log covers the whole range.
func (l *changeLog) overlapping(from, to int64, f func(*changeInterval) bool) bool {
	if !l.covers(from, to) {
		return false
	}
	for i := len(l.ivs) - 1; i >= 0 && l.ivs[i].to > from; i-- {
		if l.ivs[i].from < to && !f(l.ivs[i]) {
			break
		}
	}
	return true
}

// oldestStale returns the oldest "until" among the cached entries of
// buckets that are not valid at checkpoint: where the change records must
// start for them. ok is false when no entry needs extending.
func (c *ChecksumCache) oldestStale(group int, checkpoint int64, buckets []string) (from int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range buckets {
		e := c.nearest(bucketKey{group, b}, checkpoint)
		if e == nil {
			continue
		}
		if u := e.until; u < checkpoint && (!ok || u < from) {
			from, ok = u, true
		}
	}
	return from, ok
}

// unchanged reports whether the change records show that bucket did not
// change in (from, to]. c.mu must be held.
func (c *ChecksumCache) unchanged(group int, bucket string, from, to int64) bool {
	l := c.logs[group]
	if l == nil {
		return false
	}
	same := true
	covered := l.overlapping(from, to, func(iv *changeInterval) bool {
		same = !iv.hasBucket(bucket)
		return same
	})
	return covered && same
}

// ChangeSet is what may have changed in a group between two published
// checkpoints, by the change records. The zero value is "unknown":
// everything may have changed.
type ChangeSet struct {
	known bool
	ivs   []*changeInterval // immutable; those overlapping the range
}

// KnownChanges is the ChangeSet of a range in which only buckets may have
// changed and only the parameter lookups keys got entries or
// retractions. It is for a syncapi.ChecksumSource that keeps change
// records of its own (a server not backed by this storage); the
// ChecksumCache builds its sets from the stored change records.
func KnownChanges(buckets []string, lookups [][]byte) ChangeSet {
	iv := &changeInterval{buckets: make(map[string]struct{}, len(buckets)), lookups: make(map[string]struct{}, len(lookups))}
	for _, b := range buckets {
		iv.buckets[b] = struct{}{}
	}
	for _, k := range lookups {
		iv.lookups[string(k)] = struct{}{}
	}
	iv.index()
	return ChangeSet{known: true, ivs: []*changeInterval{iv}}
}

// Known reports whether the change records covered the whole range; when
// false, every bucket and lookup counts as changed.
func (s ChangeSet) Known() bool { return s.known }

// BucketChanged reports whether bucket, whose BucketHash is h, may have a
// different checksum at the later checkpoint than at the earlier one. The
// intervals' filters rule out most buckets without a map lookup.
func (s ChangeSet) BucketChanged(bucket string, h uint64) bool {
	if !s.known {
		return true
	}
	for _, iv := range s.ivs {
		if iv.allBuckets {
			return true
		}
		if iv.filter.mayHave(h) {
			if _, ok := iv.buckets[bucket]; ok {
				return true
			}
		}
	}
	return false
}

// LookupsChanged reports whether any of the parameter lookups keys
// (syncrules.Lookup.Key) may resolve differently at the later checkpoint:
// whether one of them got an entry or a retraction in between.
func (s ChangeSet) LookupsChanged(keys [][]byte) bool {
	if !s.known {
		return len(keys) > 0
	}
	for _, iv := range s.ivs {
		for _, k := range keys {
			if iv.hasLookup(k) {
				return true
			}
		}
	}
	return false
}

// Changes returns what may have changed in group between the published
// checkpoints from and to. The change records of a new checkpoint are
// loaded once, for every caller (one query per group and new checkpoint);
// a range the records do not cover (pruned, before this cache's first
// load, or change records disabled) is unknown. A sync stream uses it to
// keep the checksums and parameter rows it already has for what did not
// change, without asking anything per bucket.
func (c *ChecksumCache) Changes(ctx context.Context, group int, from, to int64) (ChangeSet, error) {
	if c.noChanges || from > to {
		return ChangeSet{}, nil
	}
	if from == to {
		return ChangeSet{known: true}, nil
	}
	if err := c.ensureLog(ctx, group, from, to); err != nil {
		return ChangeSet{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := ChangeSet{known: true}
	if !c.logs[group].overlapping(from, to, func(iv *changeInterval) bool {
		cs.ivs = append(cs.ivs, iv)
		return true
	}) {
		return ChangeSet{}, nil
	}
	return cs, nil
}

// LookupsChanged reports whether any of the parameter lookups keys may
// resolve differently at checkpoint to than at checkpoint from (see
// Changes): true unless the change records of (from, to] are complete and
// name none of them. With DisableChangeRecords it always reports true.
func (c *ChecksumCache) LookupsChanged(ctx context.Context, group int, from, to int64, keys [][]byte) (bool, error) {
	if len(keys) == 0 || from == to {
		return c.noChanges && len(keys) > 0, nil
	}
	cs, err := c.Changes(ctx, group, from, to)
	if err != nil {
		return true, err
	}
	return cs.LookupsChanged(keys), nil
}

// ensureLog makes the group's change log reach checkpoint to, loading the
// records after its end (or, for an empty log, after from) in one query.
// One load per group runs at a time; concurrent callers wait for it and
// then find the log extended. A log that does not reach back to a caller's
// from is not extended backwards: that caller's range is unknown.
func (c *ChecksumCache) ensureLog(ctx context.Context, group int, from, to int64) error {
	for {
		c.mu.Lock()
		l := c.logs[group]
		if l == nil {
			l = &changeLog{}
			c.logs[group] = l
		}
		if len(l.ivs) > 0 && l.ivs[len(l.ivs)-1].to >= to {
			c.mu.Unlock()
			return nil
		}
		if f := l.loading; f != nil {
			c.mu.Unlock()
			if _, err := awaitOther(ctx, f.done, &f.err); err != nil {
				return err
			}
			continue // extended, or the loader gave up with its context: look again
		}
		start := from
		if len(l.ivs) > 0 {
			start = l.ivs[len(l.ivs)-1].to
		}
		f := &logFlight{done: make(chan struct{})}
		l.loading = f
		c.mu.Unlock()

		c.changeQueries.Add(1)
		iv, err := c.s.loadChanges(ctx, group, start, to)

		c.mu.Lock()
		l.loading = nil
		if err == nil {
			l.ivs = append(l.ivs, iv)
			if n := len(l.ivs); n > maxLogIntervals {
				l.ivs = append(l.ivs[:0:0], l.ivs[n-maxLogIntervals:]...)
			}
		}
		c.mu.Unlock()
		f.err = err
		close(f.done)
		if err != nil {
			return fmt.Errorf("checksum cache: %w", err)
		}
		return nil
	}
}

// Buckets lists every bucket the change records name in the range (a
// superset of those that changed: an interval may reach past either end).
// ok is false when the set is unknown or some interval does not name its
// buckets; then any bucket may have changed.
func (s ChangeSet) Buckets() (buckets []string, ok bool) {
	if !s.known {
		return nil, false
	}
	seen := map[string]struct{}{}
	for _, iv := range s.ivs {
		if iv.allBuckets {
			return nil, false
		}
		for b := range iv.buckets {
			if _, dup := seen[b]; !dup {
				seen[b] = struct{}{}
				buckets = append(buckets, b)
			}
		}
	}
	slices.Sort(buckets)
	return buckets, true
}
