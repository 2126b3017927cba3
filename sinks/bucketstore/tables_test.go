package bucketstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestRegisterTables: records come back in the order asked with stable
// ids; a shape is recorded once (a later one does not replace it, a table
// without one gets it); processes registering overlapping sets in
// opposite orders at once all get the same records.
func TestRegisterTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	regs := make([]TableRegistration, 50)
	for i := range regs {
		regs[i] = TableRegistration{RelationID: uint32(1000 + i), Schema: "public", Name: fmt.Sprintf("t%02d", i),
			ReplicaIDColumns: []string{"id", "tenant"}, Shape: fmt.Appendf(nil, `{"v":%d}`, i)}
	}
	bare, err := s.Catalog().RegisterTable(ctx, g.ID, 999, "app", "old", []string{"id"})
	if err != nil || bare.Shape != nil {
		t.Fatalf("register without a shape: %+v, %v", bare, err)
	}

	// Four "processes" at once, half of them in reverse order.
	got := make([][]SourceTable, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for p := range got {
		wg.Go(func() {
			mine := slices.Clone(regs)
			if p%2 == 1 {
				slices.Reverse(mine)
			}
			ts, err := s.Catalog().RegisterTables(ctx, g.ID, mine)
			if p%2 == 1 {
				slices.Reverse(ts)
			}
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			got[p] = ts
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range regs {
		first := got[0][i]
		if first.Name != r.Name || first.Schema != r.Schema || first.RelationID != r.RelationID ||
			!slices.Equal(first.ReplicaIDColumns, r.ReplicaIDColumns) || string(first.Shape) != fmt.Sprintf(`{"v": %d}`, i) {
			t.Fatalf("table %d: %+v (shape %s), want %+v", i, first, first.Shape, r)
		}
		for p := 1; p < len(got); p++ {
			if got[p][i].ID != first.ID {
				t.Fatalf("table %s: id %s for process %d, %s for process 0", r.Name, got[p][i].ID, p, first.ID)
			}
		}
	}

	// Again, with other shapes, and the shape-less table among them.
	again := []TableRegistration{
		{RelationID: 999, Schema: "app", Name: "old", ReplicaIDColumns: []string{"id"}, Shape: []byte(`{"v":"new"}`)},
		{RelationID: 1000, Schema: "public", Name: "t00", ReplicaIDColumns: []string{"id", "tenant"}, Shape: []byte(`{"v":"changed"}`)},
	}
	ts, err := s.Catalog().RegisterTables(ctx, g.ID, again)
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].ID != bare.ID || string(ts[0].Shape) != `{"v": "new"}` {
		t.Fatalf("shape-less table registered again: %+v (shape %s), want id %s and the new shape", ts[0], ts[0].Shape, bare.ID)
	}
	if ts[1].ID != got[0][0].ID || string(ts[1].Shape) != `{"v": 0}` {
		t.Fatalf("table registered again: id %s, shape %s; want id %s and its first shape", ts[1].ID, ts[1].Shape, got[0][0].ID)
	}
}
