package replication

import (
	"context"
	"errors"
	"time"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// fatal reports errors that retrying cannot fix.
func fatal(err error) bool {
	return slotGone(err) || errors.Is(err, bucketstore.ErrGroupStopped) ||
		errors.Is(err, logrepl.ErrSlotMismatch) || errors.Is(err, logrepl.ErrSlotAhead) ||
		errors.Is(err, logrepl.ErrPublicationMissing) || errors.Is(err, logrepl.ErrWALLevel) ||
		errors.Is(err, logrepl.ErrAuth) || errors.Is(err, logrepl.ErrReplicationPrivilege) ||
		errors.Is(err, postgres.ErrSchemaChanged) || errors.Is(err, pipeline.ErrYielded)
}

// retry runs f until it succeeds, fails fatally or ctx ends, backing off
// between attempts: a dropped connection, a slot still held by a dead
// process's walsender or a storage hiccup heal by themselves.
func (r *Replicator) retry(ctx context.Context, what string, f func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || ctx.Err() != nil || fatal(err) {
			return err
		}
		r.log.Warn("retrying after error", "unit", what, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}
