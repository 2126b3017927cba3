package syncapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// parameterRows reads the stored parameter rows of keys at cp, the limit
// failing the connection as PowerSync does.
func (c *conn) parameterRows(ctx context.Context, cp bucketstore.Checkpoint, keys [][]byte, limit int) ([][][]byte, error) {
	rows, err := c.s.store.ParameterRows(ctx, cp.GroupID, cp.OpID, keys, limit)
	if errors.Is(err, bucketstore.ErrTooManyParameterResults) {
		// The store stops counting past the limit, so unlike
		// PowerSync's the message cannot give the total.
		return nil, &apiError{code: codeTooManyBuckets, msg: fmt.Sprintf(
			"Too many parameter query results (limit of %d); narrow the parameter queries or raise max_parameter_query_results", limit)}
	}
	if err != nil {
		return nil, fmt.Errorf("parameter lookups at checkpoint %d: %w", cp.OpID, err)
	}
	return rows, nil
}

// lookupsChanged reports whether changes may have given one of the
// stream's lookups — its plan's and those its staged resolvers made at
// the last resolution — an entry or a retraction: then its buckets must
// be resolved again.
func (c *conn) lookupsChanged(changes bucketstore.ChangeSet) bool {
	return len(c.keys) > 0 && changes.LookupsChanged(c.keys) ||
		len(c.stagedKeys) > 0 && changes.LookupsChanged(c.stagedKeys)
}

// resolveStaged appends the buckets of the plan's Sync Streams resolvers
// with several parameter lookups: one read of stored rows per stage, a
// stage's keys coming from the rows of the stages before it.
func (c *conn) resolveStaged(ctx context.Context, cp bucketstore.Checkpoint, refs []syncrules.BucketRef, limit int) ([]syncrules.BucketRef, error) {
	c.stagedKeys = c.stagedKeys[:0]
	refs, bad, err := c.plan.ResolveStaged(func(keys [][]byte) ([][][]byte, error) {
		for _, k := range keys {
			c.stagedKeys = append(c.stagedKeys, bytes.Clone(k))
		}
		return c.parameterRows(ctx, cp, keys, limit)
	}, refs)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		c.log.Warn("sync rules: bad stored parameter row", "err", bad)
	}
	return refs, nil
}
