//go:build !race

package syncapi

import (
	"os"
	"strconv"
	"testing"
)

// The bound is asserted without the race detector only: it keeps shadow
// memory and bookkeeping for every allocation and goroutine, so under
// -race the same streams measure several times larger, and the figure
// says nothing about production.

// idleStreamBound is issue 17's bar: memory per idle connection < 50 KB.
const idleStreamBound = 50 << 10

// TestIdleStreamMemory: a stream that finished its first sync (a 1.2 MB
// batch of data among it) holds less than idleStreamBound of heap and
// stack while it waits, with 50 buckets or one, with and without gzip.
// SYNCAPI_MEM_STREAMS sets the number of streams (default 200).
func TestIdleStreamMemory(t *testing.T) {
	n := 200
	if s := os.Getenv("SYNCAPI_MEM_STREAMS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("SYNCAPI_MEM_STREAMS: %v", err)
		}
	}
	const warm = 5 // streamCost's
	for _, tc := range []struct {
		name    string
		buckets int
		gz      bool
	}{
		{"50buckets/identity", memLists + 1, false},
		{"50buckets/gzip", memLists + 1, true},
		{"1bucket/identity", 1, false},
		{"1bucket/gzip", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owners := n + warm
			if tc.buckets == 1 {
				owners = 0
			}
			e := memEnv(t, owners, n+warm+10)
			per := streamCost(t, e, n, tc.gz)
			t.Logf("%d idle streams of %d buckets: %s per stream", n, tc.buckets, per)
			if per.total() > idleStreamBound {
				t.Errorf("%s per idle stream, want < %d", per, idleStreamBound)
			}
		})
	}
}
