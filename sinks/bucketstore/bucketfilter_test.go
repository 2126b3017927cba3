package bucketstore

import (
	"fmt"
	"testing"
)

// TestBucketChangedFilter: a change set built from intervals with filters
// reports every bucket they name as changed and, of 100,000 others, only
// the filter's rare false positives pass it — which the map then rules
// out, so none is reported. An interval of unknown buckets makes every
// bucket changed.
func TestBucketChangedFilter(t *testing.T) {
	t.Parallel()
	mk := func(names ...string) *changeInterval {
		iv := &changeInterval{buckets: map[string]struct{}{}, filter: new(bucketFilter)}
		for _, n := range names {
			iv.buckets[n] = struct{}{}
			iv.filter.add(BucketHash(n))
		}
		return iv
	}
	var first, second []string
	for i := range 150 {
		first = append(first, fmt.Sprintf(`by_list["a%d"]`, i))
		second = append(second, fmt.Sprintf(`by_list["b%d"]`, i))
	}
	cs := ChangeSet{known: true, ivs: []*changeInterval{mk(first...), mk(second...)}}
	for _, n := range append(first, second...) {
		if !cs.BucketChanged(n, BucketHash(n)) {
			t.Fatalf("%s named by an interval, not reported changed", n)
		}
	}
	passed := 0
	for i := range 100_000 {
		n := fmt.Sprintf(`by_list["c%d"]`, i)
		h := BucketHash(n)
		if cs.ivs[0].filter.mayHave(h) || cs.ivs[1].filter.mayHave(h) {
			passed++
		}
		if cs.BucketChanged(n, h) {
			t.Fatalf("%s reported changed", n)
		}
	}
	// Two bits per name in 4096, 150 names: about 0.5 % per filter.
	if passed > 2000 {
		t.Fatalf("%d of 100000 unnamed buckets passed the filters, want about 1 %%", passed)
	}
	unknown := ChangeSet{known: true, ivs: []*changeInterval{mk(first...), {allBuckets: true}}}
	if !unknown.BucketChanged("x", BucketHash("x")) || !(ChangeSet{}).BucketChanged("x", BucketHash("x")) {
		t.Fatal("an unknown interval or change set must report every bucket changed")
	}
}
