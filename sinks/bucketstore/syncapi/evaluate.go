package syncapi

import (
	"context"
	"fmt"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// evaluate works out the client's buckets and their checksums at cp and
// stores them as the evaluated state. From the previous evaluation it
// keeps what storage's change records show did not change: the bucket
// list when none of the client's parameter lookups got an entry (no
// ParameterRows query), and the checksum of every bucket no write touched
// (nothing asked of the cache). So an incremental checkpoint costs a
// stream only the buckets that changed, which the shared cache sums once
// for all streams.
func (c *conn) evaluate(ctx context.Context, cp bucketstore.Checkpoint) error {
	// Whether the client has everything up to the previous checkpoint:
	// then its reads for this one are small and shared (sharedread.go).
	c.caughtUp = c.evaluated && c.complete
	var changes bucketstore.ChangeSet // zero: unknown, everything changed
	if c.evaluated && cp.OpID > c.evalOpID {
		var err error
		if changes, err = c.s.cache.Changes(ctx, cp.GroupID, c.evalOpID, cp.OpID); err != nil {
			return fmt.Errorf("changes up to checkpoint %d: %w", cp.OpID, err)
		}
	}
	refs, sameRefs := c.refs, c.evaluated && changes.Known()
	if sameRefs && len(c.keys) > 0 {
		sameRefs = !changes.LookupsChanged(c.keys)
	}
	if !sameRefs {
		var err error
		if refs, err = c.resolveBuckets(ctx, cp); err != nil {
			return err
		}
	}
	// Checksums the client already has, by bucket, when the list changed.
	var kept map[string]bucketstore.BucketChecksum
	if !sameRefs && changes.Known() {
		kept = make(map[string]bucketstore.BucketChecksum, len(c.refs))
		for i, r := range c.refs {
			kept[r.ID] = c.sums[i]
		}
	}
	sums := make([]bucketstore.BucketChecksum, len(refs))
	var ask []string
	var at []int
	for i, r := range refs {
		if changes.Known() && !changes.BucketChanged(r.ID) {
			if sameRefs {
				sums[i] = c.sums[i]
				continue
			}
			if s, ok := kept[r.ID]; ok {
				sums[i] = s
				continue
			}
		}
		ask, at = append(ask, r.ID), append(at, i)
	}
	c.s.carried.Add(int64(len(refs) - len(ask)))
	if len(ask) > 0 {
		got, err := c.s.cache.Checksums(ctx, cp.GroupID, cp.OpID, ask)
		if err != nil {
			return fmt.Errorf("checksums at checkpoint %d: %w", cp.OpID, err)
		}
		for j, i := range at {
			sums[i] = got[j]
		}
	}
	c.refs, c.sums, c.evalOpID, c.evaluated = refs, sums, cp.OpID, true
	return nil
}
