package bucketstore

import (
	"fmt"
	"runtime"
	"testing"
)

// heapAfterGC returns the live heap after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestChecksumCacheBytesPerBucket measures what the cache holds per cached
// bucket (one entry each), without the bucket names: at 1,000 sync
// connections with 50 buckets each the cache is the largest share of the
// server's memory per idle connection. The names are the callers' strings,
// allocated before the first measurement, so only the cache's own memory
// counts: entry, LRU links and map slot. The race detector does not change
// the figure; the test is not parallel, so other tests' allocations do not
// either.
func TestChecksumCacheBytesPerBucket(t *testing.T) {
	const n = 20000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf(`by_user["user-%06d"]`, i)
	}
	before := heapAfterGC()
	c := (&Reader{}).NewChecksumCache(n)
	c.mu.Lock()
	for i, b := range names {
		c.store(cacheKey{bucketKey{7, b}, 1000}, uint32(i), int64(i))
	}
	c.mu.Unlock()
	after := heapAfterGC()
	if got := c.Stats().Entries; got != n {
		t.Fatalf("%d entries cached, want %d", got, n)
	}
	runtime.KeepAlive(names)
	perBucket := float64(int64(after)-int64(before)) / n
	t.Logf("%d cached buckets: %.0f bytes per bucket (without the name)", n, perBucket)
	if perBucket >= 200 {
		t.Errorf("%.0f bytes per cached bucket, want < 200", perBucket)
	}
}
