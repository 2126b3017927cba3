package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrLeaseLost reports that a lease is held by someone else now: the work
// unit must stop, because another process may already be working on it.
var ErrLeaseLost = errors.New("lease lost to another process")

// Lease is a claim on a work unit (a snapshot range, a group's stream) that
// several processes coordinate through: each unit is worked by exactly one
// process at a time, and a dead process's units are taken over once its
// leases expire. Token grows with every change of owner, so a holder can
// tell whether it still holds the same lease.
type Lease struct {
	Name  string
	Owner string
	Token int64
}

// acquireLeaseSQL takes a lease that is free or expired, or renews one
// the owner holds. The token grows with every acquisition that is not a
// renewal, and the row is never deleted (ReleaseLease expires it), so a
// token is never handed out twice: a writer fenced with an old token can
// never pass again.
const acquireLeaseSQL = `
INSERT INTO leases (name, owner, token, expires_at)
VALUES ($1, $2, 1, now() + $3::interval)
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
    token = leases.token + CASE WHEN leases.owner = EXCLUDED.owner AND leases.expires_at >= now() THEN 0 ELSE 1 END
WHERE leases.owner = EXCLUDED.owner OR leases.expires_at < now()
RETURNING token`

// leaseLockTimeout bounds how long AcquireLease waits for the lease row: a
// fenced write in flight holds it share-locked until it commits (see
// Fence), and a takeover waits for that, but never for a session that
// hangs — it reports the lease as held and is tried again later.
const leaseLockTimeout = "5s"

// AcquireLease takes the named lease for owner for ttl, if it is free,
// expired, or already owner's. ok is false when another owner holds it
// (or a write under it is still committing).
func (s *Store) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (l Lease, ok bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+leaseLockTimeout+"'"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, acquireLeaseSQL, name, owner, ttl.String()).Scan(&l.Token)
	})
	var pgErr *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	l.Name, l.Owner = name, owner
	return l, true, nil
}

// RenewLease extends a held lease; ErrLeaseLost means it expired and was
// taken by another owner (or released).
func (s *Store) RenewLease(ctx context.Context, l Lease, ttl time.Duration) error {
	tag, err := s.pool.Exec(ctx, `UPDATE leases SET expires_at = now() + $4::interval
		WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at >= now()`, l.Name, l.Owner, l.Token, ttl.String())
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew lease %s: %w", l.Name, ErrLeaseLost)
	}
	return nil
}

// ReleaseLease gives a held lease up so another process can take the unit
// at once instead of waiting for expiry. The row stays, expired, keeping
// its token (see acquireLeaseSQL).
func (s *Store) ReleaseLease(ctx context.Context, l Lease) error {
	_, err := s.pool.Exec(ctx, `UPDATE leases SET expires_at = now() - interval '1 second'
		WHERE name = $1 AND owner = $2 AND token = $3`, l.Name, l.Owner, l.Token)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.Name, err)
	}
	return nil
}

// Fence is the lease a work unit's storage writes carry. A fenced write
// checks, as the last statement of its own transaction, that the lease
// still has Token, and takes a share lock on the lease row until it
// commits: a process that lost the lease (expired while it was paused,
// then taken over) cannot commit anything after the takeover, and a
// takeover waits for a write in flight to end, so the new holder reads
// progress that includes it. The zero Fence checks nothing (a process
// working alone, tests).
type Fence struct {
	Lease string
	Token int64
}

// FenceOf returns the fence of a held lease.
func FenceOf(l Lease) Fence { return Fence{Lease: l.Name, Token: l.Token} }

// fenceSQL is the condition a fenced statement adds: the lease row with
// the token exists, share-locked until commit. $%[1]d and $%[2]d are the
// lease name and token.
const fenceSQL = `EXISTS (SELECT 1 FROM leases WHERE name = $%[1]d AND token = $%[2]d FOR SHARE)`

// fenceLost is the error of a fenced write whose check failed.
func (f Fence) lost(what string) error {
	return fmt.Errorf("%s: lease %s (token %d) is no longer held: %w", what, f.Lease, f.Token, ErrLeaseLost)
}
