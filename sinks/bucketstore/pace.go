package bucketstore

import (
	"context"
	"time"
)

// pacerStretch is the least work a pacer lets pass before it pauses:
// shorter pauses would cost more in timer wake-ups than they give back.
const pacerStretch = 20 * time.Millisecond

// pacer keeps a background task busy at most a share of the time. The
// task calls rest between units of work; after a stretch of work, rest
// sleeps so that work / (work + sleep) is the share. Compaction competes
// with replication and the sync API for storage's CPU: measured at 2,000
// changes/s with compaction running back to back (the compaction-load
// benchmark), unpaced it took 0.7 of storage's cores and replication lag
// p99 rose by 80 %.
type pacer struct {
	share float64   // 0 or ≥ 1: never pause
	since time.Time // start of the current stretch of work
}

func newPacer(share float64) *pacer { return &pacer{share: share, since: time.Now()} }

// rest pauses if the stretch of work since the last pause is long enough.
// It returns ctx's error if ctx ends during the pause.
func (p *pacer) rest(ctx context.Context) error {
	if p == nil || p.share <= 0 || p.share >= 1 {
		return ctx.Err()
	}
	worked := time.Since(p.since)
	if worked < pacerStretch {
		return ctx.Err()
	}
	t := time.NewTimer(time.Duration(float64(worked) * (1/p.share - 1)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	p.since = time.Now()
	return nil
}
