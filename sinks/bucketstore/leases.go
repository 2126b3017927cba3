package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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

// AcquireLease takes the named lease for owner for ttl, if it is free,
// expired, or already owner's. ok is false when another owner holds it.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (l Lease, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `
		INSERT INTO leases (name, owner, token, expires_at)
		VALUES ($1, $2, 1, now() + $3::interval)
		ON CONFLICT (name) DO UPDATE
		SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
		    token = leases.token + CASE WHEN leases.owner = EXCLUDED.owner THEN 0 ELSE 1 END
		WHERE leases.owner = EXCLUDED.owner OR leases.expires_at < now()
		RETURNING token`, name, owner, ttl.String()).Scan(&l.Token)
	if errors.Is(err, pgx.ErrNoRows) {
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
		WHERE name = $1 AND owner = $2 AND token = $3`, l.Name, l.Owner, l.Token, ttl.String())
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.Name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("renew lease %s: %w", l.Name, ErrLeaseLost)
	}
	return nil
}

// ReleaseLease gives a held lease up so another process can take the unit
// at once instead of waiting for expiry.
func (s *Store) ReleaseLease(ctx context.Context, l Lease) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND owner = $2 AND token = $3`, l.Name, l.Owner, l.Token)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.Name, err)
	}
	return nil
}
