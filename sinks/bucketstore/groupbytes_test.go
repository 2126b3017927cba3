package bucketstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestGroupBytes: two groups of storage version 1, one with three times
// the rows of the other in every table, share the whole size of the three
// tables (indexes and TOAST included) about 3:1, read whole and sampled.
// (A v2 group's partitions are measured, not apportioned:
// TestLayoutV2GroupBytes.)
func TestGroupBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, big := openStoreV1(t)
	small, err := s.Catalog().createGroup(ctx, "bucket_definitions: {v2: {}}", "syncpipe_", storageV1)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Compactor().GroupBytes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty storage: %v (%v), want no groups", got, err)
	}
	writers := map[int]*Writer{big.ID: newWriter(t, s, big.ID), small.ID: newWriter(t, s, small.ID)}
	tables := map[int]*model.Table{big.ID: registerTable(t, s, big.ID, "todos"), small.ID: registerTable(t, s, small.ID, "todos")}
	pad := strings.Repeat("x", 300)
	// Alternating batches, so that both groups' rows spread over the
	// table's pages as they would in production.
	for batch := range 40 {
		for g, n := range map[int]int{big.ID: 30, small.ID: 10} {
			var cs []model.Change
			for i := range n {
				id := batch*100 + i
				cs = append(cs, model.Change{Table: tables[g], Kind: model.Upsert, Key: key(id), TracksLookups: true,
					Puts:    []model.Put{put("1#b[]", "todos", fmt.Sprint(id), fmt.Sprintf(`{"id":%d,"pad":%q}`, id, pad))},
					Lookups: []model.Lookup{{Key: fmt.Appendf(nil, `["by_user","1","u%d"]`, id), Params: []byte(`[{"list_id":"l1"}]`)}}})
			}
			if _, err := writers[g].WriteChanges(ctx, cs); err != nil {
				t.Fatal(err)
			}
		}
	}
	total, pages, err := s.Compactor().tableSizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, n := range total {
		sum += n
	}
	// within: how far the ratio may be from 3:1 (a sample takes whole
	// pages, whose mix of the two groups varies).
	check := func(name string, got map[int]int64, within float64) {
		t.Helper()
		t.Logf("%s: %v of %d bytes", name, got, sum)
		if len(got) != 2 || got[big.ID] <= 0 || got[small.ID] <= 0 {
			t.Fatalf("%s: %v, want both groups", name, got)
		}
		if d := sum - got[big.ID] - got[small.ID]; d < 0 || d > 6 {
			t.Fatalf("%s: the groups take %d bytes of %d", name, got[big.ID]+got[small.ID], sum)
		}
		if r := float64(got[big.ID]) / float64(got[small.ID]); math.Abs(r-3) > within {
			t.Fatalf("%s: the groups' bytes are %.2f:1, want about 3:1", name, r)
		}
	}
	got, err := s.Compactor().GroupBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("read whole", got, 0.5)
	if pages[0] < 50 {
		t.Fatalf("bucket_data has %d pages: too few to sample", pages[0])
	}
	if got, err = s.Compactor().groupBytes(ctx, pages[0]*3/4); err != nil {
		t.Fatal(err)
	}
	check("sampled", got, 1.5)
}

// TestSamplePercent: tables up to the limit are read whole, larger ones
// at the percentage that reads the limit.
func TestSamplePercent(t *testing.T) {
	for _, c := range []struct {
		pages int64
		want  float64
	}{{0, 100}, {2560, 100}, {5120, 50}, {256000, 1}} {
		if got := samplePercent(c.pages, 2560); got != c.want {
			t.Errorf("samplePercent(%d) = %v, want %v", c.pages, got, c.want)
		}
	}
}
