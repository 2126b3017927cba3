package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/syncpipe/syncpipe/pipeline"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/sources/postgres"
	"github.com/syncpipe/syncpipe/sources/postgres/logrepl"
)

// Errors come in three kinds.
//
//   - Retryable: a dropped connection, a slot still held by a dead
//     process's walsender, a storage hiccup. They heal by themselves: the
//     unit backs off (with jitter, so many units do not retry in step) and
//     tries again, logging each attempt.
//   - Fatal: retrying will not heal them until an operator acts (wal_level,
//     credentials, privileges, a table without a key, a publication that
//     does not publish a table). They are stored in the group's last_error
//     with their time (shown by `syncpipe status`, reported by /healthz),
//     counted in syncpipe_replication_errors_total{kind="fatal"} and logged
//     with the remedy; the unit keeps checking every fatalRetry, so the fix
//     is picked up without a restart, and the stored error is cleared once
//     the unit works again.
//   - Ends of a group's stream, handled by the stream unit itself: a lost
//     or dropped slot, a publication event (both lose changes, so the group
//     is replaced by one that re-snapshots), a group that was stopped.
//
// A retryable error that persists for longer than stuckAfter is stored as
// well: the operator should know that replication is not moving. So is,
// at once, a source that cannot be reached when a group starts
// (startWhenReachable): a process that has not replicated anything yet
// has no brief outage to ride out, and the deployment is waiting.
const (
	fatalRetry  = 30 * time.Second
	maxBackoff  = 30 * time.Second
	minBackoff  = 100 * time.Millisecond
	stuckAfter  = 2 * time.Minute
	reportLimit = 2000 // bytes of an error message stored
)

// errPublication wraps publication problems found while streaming.
var errPublication = errors.New("publication changed")

// errTableAway marks a table the rules name that is gone from the source
// while its group streams: renamed, moved to another schema or dropped.
// The stream stops until it is back (see awayRetry): changes
// it made under another name are followed by its OID once the stream
// resumes, a re-created table is re-read (doc.go).
var errTableAway = errors.New("if it was renamed or moved to another schema, ALTER TABLE … RENAME TO / SET SCHEMA it back; if it was dropped, create it again; " +
	"syncpipe resumes by itself, with every change made meanwhile (or, for a new table, its rows)")

// awayRetry is how soon a stream stopped by errTableAway checks again at
// first: the table's return (a rename back) needs nothing of the operator
// on syncpipe's side, and the stream of every table of the group waits
// for it. The checks then back off to every maxBackoff, so a table gone
// for good does not log an error every few seconds.
const awayRetry = 2 * time.Second

// endsStream reports errors the stream unit handles itself.
func endsStream(err error) bool {
	return slotGone(err) || errors.Is(err, bucketstore.ErrGroupStopped) || errors.Is(err, postgres.ErrTxnNotRedelivered) ||
		publicationProblem(err) || errors.Is(err, pipeline.ErrYielded)
}

// publicationProblem reports a publication that is missing or no longer
// publishes what the rules need.
func publicationProblem(err error) bool {
	return errors.Is(err, errPublication) || errors.Is(err, logrepl.ErrPublicationMissing) ||
		errors.Is(err, postgres.ErrPublication)
}

// fatal reports errors that retrying will not heal without an operator.
func fatal(err error) bool {
	return errors.Is(err, logrepl.ErrSlotMismatch) || errors.Is(err, logrepl.ErrSlotAhead) ||
		errors.Is(err, logrepl.ErrWALLevel) || errors.Is(err, postgres.ErrWalLevel) ||
		errors.Is(err, logrepl.ErrAuth) || errors.Is(err, logrepl.ErrReplicationPrivilege) ||
		errors.Is(err, postgres.ErrReplicationRole) || errors.Is(err, postgres.ErrNoKey) ||
		errors.Is(err, postgres.ErrTableNotFound) || errors.Is(err, postgres.ErrSchemaChanged) ||
		publicationProblem(err)
}

// errorState tracks which groups this process stored an error for, so a
// recovering unit clears it with one statement and a healthy one writes
// nothing.
type errorState struct {
	mu       sync.Mutex
	stored   map[int]string // group → message stored
	progress map[int]uint64 // group → calls of recovered: work done
	count    metric.Int64Counter
}

// progressOf returns how often group's units made progress.
func (e *errorState) progressOf(group int) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.progress[group]
}

func newErrorState(mp metric.MeterProvider) *errorState {
	c, _ := mp.Meter("github.com/syncpipe/syncpipe/replication").Int64Counter("syncpipe_replication_errors_total",
		metric.WithDescription("Replication errors by kind (fatal: needs an operator; retryable: backing off) and unit kind."))
	return &errorState{stored: map[int]string{}, progress: map[int]uint64{}, count: c}
}

// report stores msg as group's last error (once per distinct message) and
// logs it.
func (r *Replicator) report(ctx context.Context, group int, unit string, err error) {
	msg := err.Error()
	if len(msg) > reportLimit {
		msg = msg[:reportLimit] + "…"
	}
	r.errs.mu.Lock()
	same := r.errs.stored[group] == msg
	r.errs.stored[group] = msg
	r.errs.mu.Unlock()
	r.log.Error("replication needs attention", "group", group, "unit", unit, "err", msg)
	if same {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if serr := r.groupErrs.ReportError(sctx, group, msg); serr != nil {
		r.log.Warn("could not store the replication error", "group", group, "err", serr)
	}
}

// recovered records that a unit of group made progress and clears the
// group's stored error, if this process stored one.
func (r *Replicator) recovered(ctx context.Context, group int) {
	r.errs.mu.Lock()
	r.errs.progress[group]++
	_, had := r.errs.stored[group]
	delete(r.errs.stored, group)
	r.errs.mu.Unlock()
	if !had {
		return
	}
	if err := r.groupErrs.ClearError(ctx, group); err != nil {
		r.log.Warn("could not clear the replication error", "group", group, "err", err)
		return
	}
	r.log.Info("replication recovered", "group", group)
}

// retry runs f until it succeeds, ctx ends, or it fails with an error that
// ends the unit (endsStream), backing off between attempts as the error's
// kind says (see above). unit names the work in logs; kind is its kind for
// the metric. Units clear a stored error themselves (recovered) once they
// make progress: success of f alone does not say the group is healthy.
func (r *Replicator) retry(ctx context.Context, group int, unit, kind string, f func(context.Context) error) error {
	backoff := minBackoff
	attempt := 0
	var failingSince time.Time
	defer r.metrics.unitEnded(unit)
	for {
		done := r.errs.progressOf(group)
		err := f(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			return nil
		}
		if endsStream(err) || errors.Is(err, bucketstore.ErrLeaseLost) {
			return err // a lost lease: the unit is another process's now
		}
		if r.errs.progressOf(group) != done {
			// The attempt got work done: this failure starts afresh.
			backoff, attempt, failingSince = minBackoff, 0, time.Time{}
		}
		attempt++
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		r.metrics.unitFailedNow(group, unit, kind, fatal(err), r.errs.progressOf(group))
		var delay time.Duration
		if fatal(err) {
			r.errs.count.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", "fatal"), attribute.String("unit", kind)))
			r.report(ctx, group, unit, err)
			delay = jitter(fatalRetry)
			if errors.Is(err, errTableAway) {
				delay = jitter(max(backoff, awayRetry))
				backoff = min(2*backoff, maxBackoff)
			}
		} else {
			r.errs.count.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", "retryable"), attribute.String("unit", kind)))
			delay = jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
			r.log.Warn("retrying after error", "group", group, "unit", unit, "attempt", attempt, "err", err, "backoff", delay.Round(time.Millisecond))
			if time.Since(failingSince) >= stuckAfter {
				r.report(ctx, group, unit, fmt.Errorf("failing for %s (attempt %d, still retrying): %w", time.Since(failingSince).Round(time.Second), attempt, err))
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// jitter spreads d over [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}
