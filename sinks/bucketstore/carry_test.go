package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// touch writes one new row into each of the given buckets as a stream
// batch and publishes a checkpoint after it.
func touch(t testing.TB, s *Store, w *Writer, tb *model.Table, group int, lsn uint64, first int, buckets ...string) int64 {
	t.Helper()
	var cs []model.Change
	for j, b := range buckets {
		i := first + j
		cs = append(cs, model.Change{Table: tb, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i),
			Puts: []model.Put{put(b, "todos", fmt.Sprint(i), fmt.Sprintf(`{"n":%d}`, i))}})
	}
	res, err := w.WriteChanges(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	return publishAt(t, s, group, lsn, res.MaxOpID).OpID
}

// askAndCheck asks the cache for buckets at cp and compares the answer
// with a full recomputation.
func askAndCheck(t testing.TB, s *Store, c *ChecksumCache, group int, cp int64, buckets []string) {
	t.Helper()
	got, err := c.Checksums(context.Background(), group, cp, buckets)
	if err != nil {
		t.Fatal(err)
	}
	if want := recompute(t, s, group, cp, buckets); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("at %d: got %v, want %v", cp, got, want)
	}
}

// TestChecksumsCarryUnchangedBuckets: buckets cached at one checkpoint are
// carried to the next with no checksum query when the change records do
// not name them; a changed bucket is summed (only its new ops) and equals
// a recomputation; a range with a snapshot batch (unknown buckets) is
// summed for every bucket; with change records disabled every bucket is
// summed, as before.
func TestChecksumsCarryUnchangedBuckets(t *testing.T) {
	t.Parallel()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	buckets := make([]string, 50)
	for b := range buckets {
		buckets[b] = bucketName(b)
	}
	cp1 := publishAt(t, s, g.ID, 10, loadSpread(t, s, w, todos, 2000, 50)).OpID
	on := s.Reader().NewChecksumCache(10000)
	off := s.Reader().NewChecksumCache(10000)
	off.DisableChangeRecords()
	for _, c := range []*ChecksumCache{on, off} {
		askAndCheck(t, s, c, g.ID, cp1, buckets)
	}
	base := on.Stats()

	// A write to a bucket nobody asks for: all 50 carried, no query.
	cp2 := touch(t, s, w, todos, g.ID, 20, 10000, bucketName(99))
	askAndCheck(t, s, on, g.ID, cp2, buckets)
	st := on.Stats()
	if st.Queries != base.Queries || st.Carried-base.Carried != 50 || st.ChangeQueries-base.ChangeQueries != 1 {
		t.Fatalf("unrelated write: %+v (before %+v), want 0 checksum queries, 50 carried, 1 change query", st, base)
	}
	// Asking again at cp2 is a plain hit.
	askAndCheck(t, s, on, g.ID, cp2, buckets)
	if st2 := on.Stats(); st2.Queries != st.Queries || st2.Hits-st.Hits != 50 || st2.ChangeQueries != st.ChangeQueries {
		t.Fatalf("repeat at the same checkpoint: %+v, want 50 hits and no query", st2)
	}

	// Bucket 7 changes (3 new ops): one query summing only those 3 ops.
	st = on.Stats()
	cp3 := touch(t, s, w, todos, g.ID, 30, 10100, bucketName(7), bucketName(7), bucketName(7))
	askAndCheck(t, s, on, g.ID, cp3, buckets)
	st2 := on.Stats()
	if st2.Queries-st.Queries != 1 || st2.Misses-st.Misses != 1 || st2.OpsSummed-st.OpsSummed != 3 || st2.Carried-st.Carried != 49 {
		t.Fatalf("one changed bucket: %+v (before %+v), want 1 query summing 1 bucket's 3 new ops, 49 carried", st2, st)
	}

	// A snapshot batch after a checkpoint (a table added later) records
	// unknown buckets: everything is summed again, and still correct.
	res, err := w.WriteSnapshot(context.Background(), []model.Change{{Table: todos, Kind: model.Upsert, Key: key(20000),
		Puts: []model.Put{put(bucketName(3), "todos", "20000", `{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	cp4 := publishAt(t, s, g.ID, 40, res.MaxOpID).OpID
	st = on.Stats()
	askAndCheck(t, s, on, g.ID, cp4, buckets)
	if st2 := on.Stats(); st2.Misses-st.Misses != 50 || st2.Carried != st.Carried {
		t.Fatalf("unknown range: %+v (before %+v), want all 50 buckets summed", st2, st)
	}

	// The baseline sums every bucket at every new checkpoint.
	for _, cp := range []int64{cp2, cp3, cp4} {
		askAndCheck(t, s, off, g.ID, cp, buckets)
	}
	if st := off.Stats(); st.Carried != 0 || st.ChangeQueries != 0 || st.Misses != 4*50 {
		t.Fatalf("disabled: %+v, want every bucket summed at each of 4 checkpoints", st)
	}
}

// TestChecksumsOneQueryFor100Connections is the P5 bar in miniature: 100
// connections, each with a global bucket and 20 buckets of its own, are
// at one checkpoint; a write changes one user's bucket; all 100 ask at the
// new checkpoint at once: one change record query and exactly one checksum
// query, summing that one bucket. Then the global bucket changes: again
// one query, shared by all 100.
func TestChecksumsOneQueryFor100Connections(t *testing.T) {
	t.Parallel()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	const conns, own = 100, 20
	global := `1#global[]`
	sets := make([][]string, conns)
	for c := range sets {
		sets[c] = []string{global}
		for b := range own {
			sets[c] = append(sets[c], fmt.Sprintf(`1#by_user["u%03d",%d]`, c, b))
		}
	}
	cp1 := touch(t, s, w, todos, g.ID, 10, 0, global, sets[5][3], sets[70][20])
	cache := s.Reader().NewChecksumCache(0)
	askAll := func(cp int64) {
		t.Helper()
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, conns)
		results := make([][]BucketChecksum, conns)
		for c := range conns {
			wg.Go(func() {
				<-start
				results[c], errs[c] = cache.Checksums(context.Background(), g.ID, cp, sets[c])
			})
		}
		close(start)
		wg.Wait()
		for c := range conns {
			if errs[c] != nil {
				t.Fatal(errs[c])
			}
			if want := recompute(t, s, g.ID, cp, sets[c]); fmt.Sprint(results[c]) != fmt.Sprint(want) {
				t.Fatalf("connection %d at %d: got %v, want %v", c, cp, results[c], want)
			}
		}
	}
	askAll(cp1)
	for _, changed := range []string{sets[42][7], global} {
		before := cache.Stats()
		cp := touch(t, s, w, todos, g.ID, uint64(cp1+100), int(cp1)+1000, changed)
		cp1 = cp
		askAll(cp)
		st := cache.Stats()
		if q := st.Queries - before.Queries; q != 1 {
			t.Errorf("change to %s: %d checksum queries for %d connections, want 1", changed, q, conns)
		}
		if m := st.Misses - before.Misses; m != 1 {
			t.Errorf("change to %s: %d buckets summed, want 1", changed, m)
		}
		if n := st.ChangeQueries - before.ChangeQueries; n != 1 {
			t.Errorf("change to %s: %d change record queries, want 1", changed, n)
		}
		t.Logf("change to %s: %+v", changed, st)
	}
}

// TestChecksumsOneQueryForManyOwnBuckets: 50 connections each hold
// buckets of their own; a write changes one bucket of each; the first
// connection to ask at the new checkpoint sums all 50 changed buckets in
// its one query (they were cached), and the other 49 find them cached: one
// checksum query where there were 50, and every answer equals a
// recomputation. A changed bucket nobody cached is left to its own caller.
func TestChecksumsOneQueryForManyOwnBuckets(t *testing.T) {
	t.Parallel()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	const conns, own = 50, 5
	sets := make([][]string, conns)
	var changed []string
	for c := range sets {
		for b := range own {
			sets[c] = append(sets[c], fmt.Sprintf(`1#by_user["u%03d",%d]`, c, b))
		}
		changed = append(changed, sets[c][c%own])
	}
	cp1 := touch(t, s, w, todos, g.ID, 10, 0, changed...)
	cache := s.Reader().NewChecksumCache(0)
	for c := range conns {
		askAndCheck(t, s, cache, g.ID, cp1, sets[c])
	}
	before := cache.Stats()
	cp2 := touch(t, s, w, todos, g.ID, 20, 1000, append(slices.Clone(changed), `1#by_user["nobody",0]`)...)
	for c := range conns {
		askAndCheck(t, s, cache, g.ID, cp2, sets[c])
	}
	st := cache.Stats()
	if q := st.Queries - before.Queries; q != 1 {
		t.Errorf("%d checksum queries for %d connections' changed buckets, want 1", q, conns)
	}
	if m, p := st.Misses-before.Misses, st.Prefetched-before.Prefetched; m != 1 || p != conns-1 {
		t.Errorf("%d buckets summed for their caller, %d for the others; want 1 and %d (the uncached one not at all)", m, p, conns-1)
	}
	if h := st.Hits - before.Hits; h != conns-1 {
		t.Errorf("%d changed buckets found cached, want %d", h, conns-1)
	}
}

// TestCompanionsWalkEachIntervalOnce: streams whose buckets change rarely
// ask with entries from long ago, so each checkpoint's query reaches back
// over many change intervals. Each interval is looked through once the
// whole of it is below the checkpoint asked, not again at every later
// checkpoint: the buckets looked at grow with the changes, not with the
// changes times the checkpoints (1 + 2 + … + 9 = 45 here before).
func TestCompanionsWalkEachIntervalOnce(t *testing.T) {
	t.Parallel()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	const conns = 10
	sets := make([][]string, conns)
	var all []string
	for c := range sets {
		sets[c] = []string{fmt.Sprintf(`1#by_user["u%03d",0]`, c)}
		all = append(all, sets[c]...)
	}
	cp := touch(t, s, w, todos, g.ID, 10, 0, all...)
	cache := s.Reader().NewChecksumCache(0)
	for c := range conns {
		askAndCheck(t, s, cache, g.ID, cp, sets[c])
	}
	for c := 1; c < conns; c++ {
		// Only stream c's bucket changes, and only stream c asks: its
		// entry is from the first checkpoint.
		cp = touch(t, s, w, todos, g.ID, uint64(10+c), 100*c, sets[c]...)
		askAndCheck(t, s, cache, g.ID, cp, sets[c])
	}
	cache.mu.Lock()
	examined := cache.examined
	cache.mu.Unlock()
	if examined > conns-1 {
		t.Errorf("companions looked at %d buckets over %d checkpoints of one changed bucket each, want at most %d", examined, conns-1, conns-1)
	}
	for c := range conns {
		askAndCheck(t, s, cache, g.ID, cp, sets[c])
	}
}

// TestChecksumsAdvance: sums of a range's ops move cached entries to the
// range's end without a query — an entry valid at the range's start, or
// one the change records show unchanged up to it — and the answers equal
// a recomputation. A bucket without an entry, or a delta with a CLEAR,
// is left to a query.
func TestChecksumsAdvance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	a, b, c := `1#by_user["a"]`, `1#by_user["b"]`, `1#by_user["c"]`
	cp1 := touch(t, s, w, todos, g.ID, 10, 0, a, b, c)
	cache := s.Reader().NewChecksumCache(0)
	askAndCheck(t, s, cache, g.ID, cp1, []string{a, b})
	cp2 := touch(t, s, w, todos, g.ID, 20, 100, a)
	// The change records as streams load them, a checkpoint at a time.
	if _, err := cache.Changes(ctx, g.ID, cp1, cp2); err != nil {
		t.Fatal(err)
	}
	cp3 := touch(t, s, w, todos, g.ID, 30, 200, a, b, c)
	delta := func(from, to int64, bucket string) BucketDelta {
		x, y := recompute(t, s, g.ID, from, []string{bucket})[0], recompute(t, s, g.ID, to, []string{bucket})[0]
		return BucketDelta{Bucket: bucket, Checksum: y.Checksum - x.Checksum, Count: y.Count - x.Count}
	}
	cache.Advance(g.ID, cp1, cp2, []BucketDelta{delta(cp1, cp2, a)})
	before := cache.Stats()
	askAndCheck(t, s, cache, g.ID, cp2, []string{a})
	if st := cache.Stats(); st.Queries != before.Queries || st.Advanced != 1 {
		t.Fatalf("a at cp2 after Advance: %+v, want no query and 1 advanced", st)
	}
	// b's entry is from cp1; the change records show it unchanged to cp2.
	if _, err := cache.Changes(ctx, g.ID, cp2, cp3); err != nil {
		t.Fatal(err)
	}
	cache.Advance(g.ID, cp2, cp3, []BucketDelta{delta(cp2, cp3, a), delta(cp2, cp3, b), delta(cp2, cp3, c)})
	before = cache.Stats()
	askAndCheck(t, s, cache, g.ID, cp3, []string{a, b})
	if st := cache.Stats(); st.Queries != before.Queries || st.Advanced != 3 {
		t.Fatalf("a and b at cp3 after Advance: %+v, want no query and 3 advanced in all", st)
	}
	// c had no entry; a CLEAR in a delta is not an increment.
	cp4 := touch(t, s, w, todos, g.ID, 40, 300, a)
	d := delta(cp3, cp4, a)
	d.Clear = true
	cache.Advance(g.ID, cp3, cp4, []BucketDelta{d})
	before = cache.Stats()
	askAndCheck(t, s, cache, g.ID, cp4, []string{a, c})
	if st := cache.Stats(); st.Queries != before.Queries+1 || st.Advanced != 3 {
		t.Fatalf("a (CLEAR) and c (no entry) at cp4: %+v, want one query and no more advanced", st)
	}
}
