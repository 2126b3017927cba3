package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// drainAll pages through reqs the way the sync API does (continue each
// bucket from the last op id seen, drop completed ones) and returns the
// rows as "bucket op_id checksum" lines.
func drainAll(t *testing.T, s *Store, shape ReadShape, group int, cp int64, reqs []BucketRequest, limit int) []string {
	t.Helper()
	reqs = slices.Clone(reqs)
	var out []string
	for len(reqs) > 0 {
		var last OpRow
		more, err := s.Reader().ReadBucketDataShape(context.Background(), shape, group, cp, reqs, limit, func(r *OpRow) error {
			out = append(out, fmt.Sprintf("%s %d %d", r.Bucket, r.OpID, r.Checksum))
			last = *r
			return nil
		})
		if err != nil {
			t.Fatalf("shape %d: %v", shape, err)
		}
		if !more {
			break
		}
		i := slices.IndexFunc(reqs, func(r BucketRequest) bool { return r.Bucket == last.Bucket })
		reqs = reqs[i:]
		reqs[0].After = last.OpID
	}
	return out
}

// TestReadShapesAgree: the benchmark baseline shape (OR-chain) returns the
// very rows of the production read for requests in bucket name order, and
// fails loudly, instead of returning a wrong page, for requests in another
// order.
// In both storage versions.
func TestReadShapesAgree(t *testing.T) {
	t.Parallel()
	onVersions(t, readShapesAgree)
}

func readShapesAgree(t *testing.T, s *Store, g Group) {
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	last := loadSpread(t, s, w, todos, 700, 7)
	cp := publishAt(t, s, g.ID, 10, last)

	var reqs []BucketRequest
	for b := range 7 {
		reqs = append(reqs, BucketRequest{Bucket: bucketName(b)})
	}
	reqs[3].After = last / 2 // one client already half way through a bucket
	for _, limit := range []int{1, 37, 1000} {
		want := drainAll(t, s, ReadLateral, g.ID, cp.OpID, reqs, limit)
		got := drainAll(t, s, ReadORChain, g.ID, cp.OpID, reqs, limit)
		if len(want) < 600 || !slices.Equal(got, want) {
			t.Fatalf("limit %d: OR-chain read %d rows, LATERAL %d; first difference in %v vs %v",
				limit, len(got), len(want), head(got), head(want))
		}
	}

	swapped := []BucketRequest{reqs[1], reqs[0]}
	_, err := s.Reader().ReadBucketDataShape(context.Background(), ReadORChain, g.ID, cp.OpID, swapped, 1000, func(*OpRow) error { return nil })
	if !errors.Is(err, errReadOrder) {
		t.Fatalf("OR-chain with requests out of name order: err = %v, want errReadOrder", err)
	}
	if _, err := s.Reader().ReadBucketDataShape(context.Background(), ReadShape(9), g.ID, cp.OpID, reqs, 10, nil); err == nil {
		t.Fatal("unknown shape accepted")
	}
}
