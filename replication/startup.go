package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// startupRetryFor bounds how long Run's start-up retries a lost
// connection before the process gives up (exit 1): a restart of the
// source or of storage takes seconds; one that lasts longer is for the
// deployment (Kubernetes restarts the pod) and the operator to see.
const startupRetryFor = 2 * time.Minute

// errSourceDown marks a connection to the source that could not be
// opened for a reason the source's return heals (refused, timed out, a
// name that does not resolve, a server starting or shutting down).
// Start-up does not wait for it, nor ends for it: the group starts in
// the background once the source answers (startWhenReachable), while the
// API serves what storage holds.
var errSourceDown = errors.New("source unreachable")

// sourceDownError wraps err, a failed connection to the source, as
// errSourceDown; the message stays err's.
type sourceDownError struct{ err error }

func (e sourceDownError) Error() string { return e.err.Error() }

func (e sourceDownError) Unwrap() []error { return []error{e.err, errSourceDown} }

// sourceDown marks err, from opening a connection to the source, as
// errSourceDown when retrying can heal it; credentials, a missing
// database and the like stay as they are (start-up ends for them).
func sourceDown(err error) error {
	if err != nil && transient(err) {
		return sourceDownError{err}
	}
	return err
}

// atStart runs step, a part of Run's start-up, retrying it with backoff
// while it fails with a lost or refused connection (transient): a server
// that restarts while the process starts should cost a few seconds, not
// the process. A source that cannot be connected to (errSourceDown) is
// returned at once, for the caller to wait for it in the background.
// Every other error, and one that persists for startupRetryFor, ends the
// start-up. step must be safe to run again after it failed part-way.
func (r *Replicator) atStart(ctx context.Context, what string, step func(context.Context) error) error {
	backoff := minBackoff
	var since time.Time
	for attempt := 1; ; attempt++ {
		err := step(ctx)
		if err == nil || ctx.Err() != nil || !transient(err) || errors.Is(err, errSourceDown) {
			return err
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) >= startupRetryFor {
			return fmt.Errorf("%s: still failing after %s of retries: %w", what, startupRetryFor, err)
		}
		delay := jitter(backoff)
		backoff = min(2*backoff, maxBackoff)
		r.log.Warn("retrying after error", "unit", "start-up: "+what, "attempt", attempt, "err", err, "backoff", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// transient reports a lost, refused or timed-out connection, or a server
// that is shutting down or starting: what a restart of PostgreSQL looks
// like to a client. Errors a running server answers with (credentials, a
// missing database, SQL) are not transient: retrying does not heal them.
func transient(err error) bool {
	if errors.Is(err, bucketstore.ErrStorageRestarted) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"53300": // too many connections: another process's are closing
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exception
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}
