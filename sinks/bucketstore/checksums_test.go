package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// recompute is the reference: every bucket's checksum and count at
// checkpoint, summed from scratch.
func recompute(t testing.TB, s *Store, group int, checkpoint int64, buckets []string) []BucketChecksum {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `
		SELECT b.name, coalesce(sum(d.checksum) % 4294967296, 0)::int8, count(d.op_id)
		FROM unnest($2::text[]) WITH ORDINALITY AS b(name, i)
		LEFT JOIN bucket_ops d ON d.group_id = $1 AND d.bucket_name = b.name AND d.op_id <= $3
		GROUP BY b.name, b.i ORDER BY b.i`, group, buckets, checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []BucketChecksum
	for rows.Next() {
		var b BucketChecksum
		var sum int64
		if err := rows.Scan(&b.Bucket, &sum, &b.Count); err != nil {
			t.Fatal(err)
		}
		b.Checksum = uint32(sum)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// randomHistory writes random changes (rows entering, moving between and
// leaving up to 12 buckets) and publishes a checkpoint after each batch.
func randomHistory(t testing.TB, s *Store, group int, w *Writer, tb *model.Table, rng *rand.Rand, checkpoints int) []int64 {
	t.Helper()
	ctx := context.Background()
	var cps []int64
	for c := range checkpoints {
		var cs []model.Change
		for range 1 + rng.IntN(10) {
			i := rng.IntN(60)
			if rng.IntN(5) == 0 {
				cs = append(cs, model.Change{Table: tb, Kind: model.Delete, Key: key(i), KeyOrder: keyOrder(i)})
				continue
			}
			id := fmt.Sprint(i)
			ch := model.Change{Table: tb, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i)}
			for _, b := range rng.Perm(12)[:1+rng.IntN(3)] {
				ch.Puts = append(ch.Puts, put(bucketName(b), "todos", id, fmt.Sprintf(`{"id":"%s","v":%d}`, id, rng.IntN(1000))))
			}
			cs = append(cs, ch)
		}
		res, err := w.WriteChanges(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		cps = append(cps, publishAt(t, s, group, uint64(100+c), res.MaxOpID).OpID)
	}
	return cps
}

// TestChecksumsMatchRecomputation is the property test: random writes over
// 40 checkpoints, then concurrent callers asking a small (evicting) cache
// for random bucket sets at random checkpoints, in random order; every
// answer must equal a full recomputation.
func TestChecksumsMatchRecomputation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	rng := rand.New(rand.NewPCG(3, 4))
	cps := randomHistory(t, s, g.ID, w, todos, rng, 40)
	all := make([]string, 14) // two buckets never get ops
	for b := range all {
		all[b] = bucketName(b)
	}
	want := map[int64][]BucketChecksum{}
	for _, cp := range cps {
		want[cp] = recompute(t, s, g.ID, cp, all)
	}
	for _, size := range []int{7, 40, 1000} {
		cache := s.Reader().NewChecksumCache(size)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for worker := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(size), uint64(worker)))
				for q := range 150 {
					cp := cps[rng.IntN(len(cps))]
					if q%3 == 0 { // walk forward too, the common case
						cp = cps[q*len(cps)/150]
					}
					idx := rng.Perm(len(all))[:1+rng.IntN(len(all))]
					buckets := make([]string, len(idx))
					for i, b := range idx {
						buckets[i] = all[b]
					}
					got, err := cache.Checksums(ctx, g.ID, cp, buckets)
					if err != nil {
						errs <- err
						return
					}
					for i, b := range idx {
						if got[i] != want[cp][b] {
							errs <- fmt.Errorf("cache size %d, checkpoint %d: got %+v, want %+v", size, cp, got[i], want[cp][b])
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		st := cache.Stats()
		if st.Entries > size {
			t.Fatalf("cache size %d holds %d entries", size, st.Entries)
		}
		t.Logf("cache size %d: %+v", size, st)
	}
}

// TestChecksumsAfterClear simulates compaction replacing a bucket's first
// ops by a CLEAR: a range over the CLEAR replaces the cached base, one
// after it adds to it, and both equal a recomputation.
func TestChecksumsAfterClear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	rng := rand.New(rand.NewPCG(5, 6))
	cps := randomHistory(t, s, g.ID, w, todos, rng, 30)
	bucket := bucketName(3)
	cache := s.Reader().NewChecksumCache(100)
	early, mid := cps[5], cps[20]
	for _, cp := range []int64{early, mid} {
		if _, err := cache.Checksums(ctx, g.ID, cp, []string{bucket}); err != nil {
			t.Fatal(err)
		}
	}
	// Compact: the bucket's ops up to cps[12] become one CLEAR holding their
	// sum, at the op id of the last op it replaces.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var clearID, sum int64
	lay := testLayout(t, s, g.ID)
	col, arg := "bucket_name", any(bucket)
	if lay.interned {
		col, arg = "bucket", bucketKeys(t, s, g.ID, []string{bucket}).([]int64)[0]
	}
	err = tx.QueryRow(ctx, `SELECT max(op_id), sum(checksum::int8) % 4294967296 FROM `+lay.ops+`
		WHERE group_id = $1 AND `+col+` = $2 AND op_id <= $3`, g.ID, arg, cps[12]).Scan(&clearID, &sum)
	if err != nil {
		t.Fatal(err)
	}
	if clearID <= early {
		t.Fatalf("test data: CLEAR at %d is not after the early checkpoint %d", clearID, early)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+lay.ops+` WHERE group_id = $1 AND `+col+` = $2 AND op_id <= $3`, g.ID, arg, cps[12]); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+lay.ops+` (group_id, `+col+`, op_id, op, checksum, target_op)
		VALUES ($1, $2, $3, 4, $4, $3)`, g.ID, arg, clearID, lay.checksumArg(checksum.FromInt64(sum))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	last := cps[len(cps)-1]
	// From the early base the range (early, last] holds the CLEAR: a full
	// result. From the mid base it does not: sum added to the base, which
	// compaction did not change.
	for _, c := range []*ChecksumCache{cache, s.Reader().NewChecksumCache(100)} {
		got, err := c.Checksums(ctx, g.ID, last, []string{bucket})
		if err != nil {
			t.Fatal(err)
		}
		want := recompute(t, s, g.ID, last, []string{bucket})
		if got[0].Checksum != want[0].Checksum {
			t.Fatalf("after CLEAR: checksum %d, want %d", got[0].Checksum, want[0].Checksum)
		}
	}
	// The early base is the only one below cps[13]: its range has the CLEAR.
	fresh := s.Reader().NewChecksumCache(100)
	if _, err := fresh.Checksums(ctx, g.ID, early, []string{bucket}); err != nil {
		t.Fatal(err)
	}
	got, err := fresh.Checksums(ctx, g.ID, cps[13], []string{bucket})
	if err != nil {
		t.Fatal(err)
	}
	if want := recompute(t, s, g.ID, cps[13], []string{bucket}); got[0] != want[0] {
		t.Fatalf("range over CLEAR: got %+v, want %+v (replace, not add)", got[0], want[0])
	}
}

// TestChecksumQueriesPerCheckpoint is the "one query per checkpoint
// regardless of client count" bar: 50 callers asking at once for the same
// 100 buckets cause one query; after a write to 2 of the buckets and a new
// checkpoint, the next 50 callers cause one more query, which sums only
// the new ops.
func TestChecksumQueriesPerCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	buckets := make([]string, 100)
	for b := range buckets {
		buckets[b] = bucketName(b)
	}
	cp1 := publishAt(t, s, g.ID, 10, loadSpread(t, s, w, todos, 5000, 100)).OpID
	cache := s.Reader().NewChecksumCache(10000)

	askAll := func(cp int64) {
		t.Helper()
		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make([][]BucketChecksum, 50)
		errs := make([]error, 50)
		for c := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[c], errs[c] = cache.Checksums(ctx, g.ID, cp, buckets)
			}()
		}
		close(start)
		wg.Wait()
		want := recompute(t, s, g.ID, cp, buckets)
		for c := range 50 {
			if errs[c] != nil {
				t.Fatal(errs[c])
			}
			if fmt.Sprint(results[c]) != fmt.Sprint(want) {
				t.Fatalf("caller %d got a different answer than the recomputation", c)
			}
		}
	}
	askAll(cp1)
	st1 := cache.Stats()
	if st1.Queries != 1 || st1.Misses != 100 || st1.OpsSummed != 5000 {
		t.Fatalf("first checkpoint, 50 callers: %+v, want 1 query fetching 100 buckets over 5000 ops", st1)
	}
	// Change 2 of the 100 buckets: 3 rows each.
	var cs []model.Change
	for _, b := range []int{17, 42} {
		for j := range 3 {
			i := 10000 + b*10 + j
			cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i),
				Puts: []model.Put{put(bucketName(b), "todos", fmt.Sprint(i), `{}`)}})
		}
	}
	res, err := w.WriteChanges(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	cp2 := publishAt(t, s, g.ID, 20, res.MaxOpID).OpID
	askAll(cp2)
	st2 := cache.Stats()
	if st2.Queries-st1.Queries != 1 || st2.OpsSummed-st1.OpsSummed != 6 {
		t.Fatalf("second checkpoint, 50 callers: %d queries summing %d ops, want 1 query summing the 6 new ops (%+v)",
			st2.Queries-st1.Queries, st2.OpsSummed-st1.OpsSummed, st2)
	}
	t.Logf("100 buckets × 50 callers × 2 checkpoints: %+v", st2)

	// The incremental range query is one primary key probe per bucket (the
	// ops it reads are counted exactly by OpsSummed above).
	starts := make([]int64, len(buckets))
	for i := range starts {
		starts[i] = cp1
	}
	opsRel, opsKey, _ := relations(t, s, g.ID)
	plan, took := explain(t, s, testLayout(t, s, g.ID).checksumRange, g.ID, bucketKeys(t, s, g.ID, buckets), cp2, starts)
	var loops, filtered float64
	walkPlan(&plan, func(n *planNode, _ []string) {
		if n.Relation == opsRel {
			if n.NodeType != "Index Scan" || n.Index != opsKey {
				t.Errorf("checksum range read by %s %s, want Index Scan on %s", n.NodeType, n.Index, opsKey)
			}
			loops, filtered = n.ActualLoops, n.RowsFiltered
		}
	}, nil)
	if loops != 100 || filtered != 0 {
		t.Errorf("checksum range: %v index probes, %v rows filtered, want 100 probes and no filtering", loops, filtered)
	}
	t.Logf("incremental checksum query over 100 buckets (2 changed, 6 new ops): %v, %v index probes", took, loops)
}

// TestChecksumsWaiterSurvivesFetcherCancel: a caller waiting for another
// caller's fetch is not failed by that caller's cancelled context; it
// fetches itself.
func TestChecksumsWaiterSurvivesFetcherCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	cp := publishAt(t, s, g.ID, 10, loadSpread(t, s, w, todos, 100, 4)).OpID
	buckets := []string{bucketName(0), bucketName(1), bucketName(2), bucketName(3)}
	cache := s.Reader().NewChecksumCache(100)
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	cache.beforeFetch = func() {
		if first { // only the first fetch (A's) is held; calls are serial here
			first = false
			close(entered)
			<-release
		}
	}
	actx, cancelA := context.WithCancel(ctx)
	aErr := make(chan error, 1)
	go func() {
		_, err := cache.Checksums(actx, g.ID, cp, buckets)
		aErr <- err
	}()
	<-entered
	type result struct {
		sums []BucketChecksum
		err  error
	}
	bRes := make(chan result, 1)
	go func() {
		sums, err := cache.Checksums(ctx, g.ID, cp, buckets)
		bRes <- result{sums, err}
	}()
	// Wait until B waits for A's four buckets (a spin on a counter; no
	// timing assumption).
	deadline := time.Now().Add(30 * time.Second)
	for cache.Stats().Shared < 4 {
		if time.Now().After(deadline) {
			t.Fatal("B never waited for A's fetch")
		}
		runtime.Gosched()
	}
	cancelA()
	close(release)
	if err := <-aErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("A: %v, want context.Canceled", err)
	}
	r := <-bRes
	if r.err != nil {
		t.Fatalf("B failed with A's cancellation: %v", r.err)
	}
	if want := recompute(t, s, g.ID, cp, buckets); fmt.Sprint(r.sums) != fmt.Sprint(want) {
		t.Fatalf("B got %v, want %v", r.sums, want)
	}
	if q := cache.Stats().Queries; q != 2 {
		t.Fatalf("%d queries, want 2 (A's failed one, B's)", q)
	}
}

// TestChecksumCacheLRUModel checks the cache's intrusive lists against a
// plain model (a slice, most recently used first) under random stores and
// hits, for several checkpoints per bucket and two groups: the same
// nearest entries, the same evictions, and chains that hold exactly the
// cached entries, descending by checkpoint. It needs no database.
func TestChecksumCacheLRUModel(t *testing.T) {
	type modelEntry struct {
		k   cacheKey
		sum uint32
	}
	for _, size := range []int{1, 5, 40} {
		c := (&Reader{}).NewChecksumCache(size)
		var model []modelEntry
		nearest := func(bk bucketKey, cp int64) int {
			best := -1
			for i, m := range model {
				if m.k.bucketKey == bk && m.k.cp <= cp && (best < 0 || m.k.cp > model[best].k.cp) {
					best = i
				}
			}
			return best
		}
		touch := func(i int) { model = append(append([]modelEntry{model[i]}, model[:i]...), model[i+1:]...) }
		rng := rand.New(rand.NewPCG(uint64(size), 9))
		for step := range 5000 {
			bk := bucketKey{1 + rng.IntN(2), bucketName(rng.IntN(6))}
			cp := int64(1 + rng.IntN(12))
			c.mu.Lock()
			if rng.IntN(2) == 0 { // a hit, as Checksums has it
				got, want := c.nearest(bk, cp), nearest(bk, cp)
				switch {
				case want < 0 && got != nil:
					t.Fatalf("size %d, step %d: nearest(%v, %d) = entry at %d, want none", size, step, bk, cp, got.cp)
				case want >= 0 && (got == nil || got.cp != model[want].k.cp || got.sum != model[want].sum):
					t.Fatalf("size %d, step %d: nearest(%v, %d) = %+v, want %+v", size, step, bk, cp, got, model[want])
				case want >= 0:
					c.lru.moveToFront(got)
					touch(want)
				}
			} else {
				sum := uint32(step)
				c.store(cacheKey{bk, cp}, sum, int64(step))
				if i := slices.IndexFunc(model, func(m modelEntry) bool { return m.k == cacheKey{bk, cp} }); i >= 0 {
					touch(i)
				} else {
					model = append([]modelEntry{{cacheKey{bk, cp}, sum}}, model...)
					model = model[:min(len(model), size)]
				}
			}
			want := make([]cacheKey, len(model))
			for i, m := range model {
				want[i] = m.k
			}
			checkLists(t, c, want)
			c.mu.Unlock()
		}
	}
}

// checkLists fails t unless c's LRU holds exactly the keys of want, in
// that order, and its bucket chains hold the same entries, linked both
// ways and descending by checkpoint. c.mu must be held.
func checkLists(t *testing.T, c *ChecksumCache, want []cacheKey) {
	t.Helper()
	var lru []cacheKey
	for e := c.lru.root.next; e != &c.lru.root; e = e.next {
		if e.next.prev != e {
			t.Fatalf("LRU link broken at %v@%d", e.bucketKey, e.cp)
		}
		lru = append(lru, cacheKey{e.bucketKey, e.cp})
	}
	if !slices.Equal(lru, want) || c.lru.len() != len(want) {
		t.Fatalf("LRU %v (len %d), want %v", lru, c.lru.len(), want)
	}
	chained := 0
	for group, m := range c.byBucket {
		if len(m) == 0 {
			t.Fatalf("group %d has an empty map", group)
		}
		for bucket, e := range m {
			if e.newer != nil {
				t.Fatalf("%s's head at %d has a newer entry", bucket, e.cp)
			}
			for ; e != nil; e = e.older {
				if e.bucketKey != (bucketKey{group, bucket}) || e.prev == nil {
					t.Fatalf("%s's chain holds %v@%d (in the LRU: %v)", bucket, e.bucketKey, e.cp, e.prev != nil)
				}
				if o := e.older; o != nil && (o.cp >= e.cp || o.newer != e) {
					t.Fatalf("%s's chain: %d then %d", bucket, e.cp, o.cp)
				}
				chained++
			}
		}
	}
	if chained != len(lru) {
		t.Fatalf("%d entries chained, %d in the LRU", chained, len(lru))
	}
}

// TestChecksumsOfStoppedGroup: a group taken over is stopped and then
// cleared, while the checksum cache may be loading from it. A fetch whose
// query ran after the clearing began (here: the whole clearing, between
// the change records and the sums) fails with ErrGroupStopped and caches
// nothing, and so does every later load of the group's checksums or
// change records; what was cached while it served is left as it was.
func TestChecksumsOfStoppedGroup(t *testing.T) {
	t.Parallel()
	onVersions(t, func(t *testing.T, s *Store, g Group) {
		ctx := context.Background()
		w := newWriter(t, s, g.ID)
		todos := registerTable(t, s, g.ID, "todos")
		readyGroup(t, s, g.ID, todos)
		buckets := []string{bucketName(0), bucketName(1)}
		cp1 := publishAt(t, s, g.ID, 10, loadSpread(t, s, w, todos, 200, 2)).OpID
		cache := s.Reader().NewChecksumCache(100)
		before, err := cache.Checksums(ctx, g.ID, cp1, buckets)
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Upsert, Key: key(0),
			Puts: []model.Put{put(bucketName(0), "todos", "0", `{"id":"0","description":"changed"}`)}}})
		if err != nil {
			t.Fatal(err)
		}
		cp2 := publishAt(t, s, g.ID, 20, res.MaxOpID).OpID
		w.Close()
		cleared := false
		cache.beforeFetch = func() {
			if cleared {
				return
			}
			cleared = true
			if err := s.Catalog().SetState(ctx, g.ID, StateStop); err != nil {
				t.Error(err)
			}
			if _, err := s.Compactor().Terminate(ctx, g.ID, ClearOptions{}); err != nil {
				t.Error(err)
			}
		}
		entries := cache.Stats().Entries
		for i := range 2 {
			got, err := cache.Checksums(ctx, g.ID, cp2, buckets)
			if !errors.Is(err, ErrGroupStopped) {
				t.Fatalf("checksums at %d, asked %d after the group was stopped and cleared: %+v, %v; want ErrGroupStopped", cp2, i+1, got, err)
			}
		}
		if !cleared {
			t.Fatal("no checksum query ran")
		}
		if n := cache.Stats().Entries; n != entries {
			t.Fatalf("the cache holds %d entries, %d before the stopped group's loads", n, entries)
		}
		// The change records of (cp1, cp2] were loaded while it served; a
		// cache that has not loaded them does not now.
		if _, err := s.Reader().NewChecksumCache(100).Changes(ctx, g.ID, cp1, cp2); !errors.Is(err, ErrGroupStopped) {
			t.Fatalf("change records of the stopped group: %v, want ErrGroupStopped", err)
		}
		if got, err := cache.Checksums(ctx, g.ID, cp1, buckets); err != nil || !slices.Equal(got, before) {
			t.Fatalf("checksums at %d, cached while the group served: %+v, %v; want %+v", cp1, got, err, before)
		}
	})
}

// BenchmarkChecksumsNewCheckpoint measures the checksum path of a new
// checkpoint, what every stream's evaluation waits for: one caller asks
// for 100 cached buckets at a checkpoint that changed one of them (a
// change record load, one checksum query and the group's check after it).
// The write and the publication are not timed.
func BenchmarkChecksumsNewCheckpoint(b *testing.B) {
	ctx := context.Background()
	s, g := openStore(b)
	w := newWriter(b, s, g.ID)
	todos := registerTable(b, s, g.ID, "todos")
	readyGroup(b, s, g.ID, todos)
	buckets := make([]string, 100)
	for i := range buckets {
		buckets[i] = bucketName(i)
	}
	lsn := uint64(10)
	cp := publishAt(b, s, g.ID, lsn, loadSpread(b, s, w, todos, 5000, 100)).OpID
	cache := s.Reader().NewChecksumCache(10000)
	if _, err := cache.Checksums(ctx, g.ID, cp, buckets); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		row := 10000 + i
		res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Upsert, Key: key(row),
			Puts: []model.Put{put(bucketName(i%100), "todos", fmt.Sprint(row), `{}`)}}})
		if err != nil {
			b.Fatal(err)
		}
		lsn += 10
		cp = publishAt(b, s, g.ID, lsn, res.MaxOpID).OpID
		b.StartTimer()
		if _, err := cache.Checksums(ctx, g.ID, cp, buckets); err != nil {
			b.Fatal(err)
		}
	}
}
