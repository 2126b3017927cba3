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
	// Takeover is set by AcquireLease when another owner held the lease
	// and had not released it (it expired, or its holder's process is
	// gone): the unit was taken over rather than handed on.
	Takeover bool
}

// acquireLeaseSQL takes a lease that is free or expired, whose holder's
// session is gone (see liveSession), or that the owner holds already (a
// renewal). The token grows with every acquisition that is not a renewal,
// and the row is never deleted (ReleaseLease expires it), so a token is
// never handed out twice: a writer fenced with an old token never passes
// again. taken_over says whether another owner held it unreleased
// (ReleaseLease clears pid).
const acquireLeaseSQL = `
INSERT INTO leases AS l (name, owner, token, expires_at, pid, backend_start)
VALUES ($1, $2, 1, now() + $3::interval, $4, $5)
ON CONFLICT (name) DO UPDATE SET ` + takeLeaseSetSQL + `
WHERE ` + leaseFreeSQL + `
RETURNING token, taken_over`

// takeLeaseSetSQL is what an acquisition sets on an existing lease row l
// (the upsert's EXCLUDED row is the claim): new holder and expiry, the
// token moved on unless it is a renewal, and whether it was a takeover.
const takeLeaseSetSQL = `owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, pid = EXCLUDED.pid, backend_start = EXCLUDED.backend_start,
    token = l.token + CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at >= now() THEN 0 ELSE 1 END,
    taken_over = l.owner <> EXCLUDED.owner AND l.pid IS NOT NULL`

// leaseFreeSQL is true when the claim may take the existing lease row l:
// the claimant holds it, it expired, or its holder's session is gone.
const leaseFreeSQL = `l.owner = EXCLUDED.owner OR l.expires_at < now() OR NOT ` + liveHolderSQL

// liveHolderSQL is true while the lease row l names a storage session
// that still exists (see liveSession).
const liveHolderSQL = `EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.pid AND a.backend_start = l.backend_start)`

// leaseLockTimeout bounds how long AcquireLease waits for the lease row: a
// fenced write in flight holds it share-locked until it commits (see
// Fence), and a takeover waits for that, but never for a session that
// hangs — it reports the lease as held and is tried again later.
const leaseLockTimeout = "5s"

// sessionID identifies a storage session (a backend) for as long as it
// lives.
type sessionID struct {
	pid   int32
	start time.Time
}

// liveSession returns the store's lease session: a connection held open
// for the process's life, whose backend the leases it takes name. When
// the process dies, the kernel closes the connection, the backend exits,
// and every lease naming it is free for others at once; a process that is
// only paused keeps its session, so its leases run out by time — and its
// writes are fenced. A broken session is replaced (leases renewed after
// that name the new one).
func (s *Leases) liveSession(ctx context.Context) (sessionID, error) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.live != nil {
		if err := s.live.Ping(ctx); err == nil {
			return s.liveID, nil
		}
		s.dropLiveLocked()
	}
	if err := s.openLiveLocked(ctx); err != nil {
		return sessionID{}, err
	}
	return s.liveID, nil
}

// openLiveLocked opens the lease session (s.liveMu held). It waits at
// most leaseLockTimeout for a lock, so the claims run on it
// (ClaimSnapshotUnits) never hang on a lease row.
func (s *Leases) openLiveLocked(ctx context.Context) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("open the lease session: %w", err)
	}
	var id sessionID
	if err := c.QueryRow(ctx, `SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&id.pid, &id.start); err != nil {
		c.Release()
		return fmt.Errorf("open the lease session: %w", err)
	}
	if _, err := c.Exec(ctx, "SET lock_timeout = '"+leaseLockTimeout+"'"); err != nil {
		c.Release()
		return fmt.Errorf("open the lease session: %w", err)
	}
	s.live, s.liveID = c, id
	return nil
}

// dropLiveLocked closes the lease session (s.liveMu held). It is taken
// out of the pool rather than given back: its lock_timeout is its own.
func (s *Leases) dropLiveLocked() {
	c := s.live.Hijack()
	s.live = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx) // the session is given up: nothing to do if closing fails
}

// AcquireLease takes the named lease for owner for ttl, if it is free,
// expired, its holder's process is gone, or it is owner's already. ok is
// false when another owner holds it (or a write under it is still
// committing). owner must be unique to the process and its start.
func (s *Leases) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (l Lease, ok bool, err error) {
	id, err := s.liveSession(ctx)
	if err != nil {
		return Lease{}, false, fmt.Errorf("acquire lease %s: %w", name, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+leaseLockTimeout+"'"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, acquireLeaseSQL, name, owner, ttl.String(), id.pid, id.start).Scan(&l.Token, &l.Takeover)
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

// RenewLease extends a held lease (naming the current lease session);
// ErrLeaseLost means it expired, or was taken by another owner or
// released.
func (s *Leases) RenewLease(ctx context.Context, l Lease, ttl time.Duration) error {
	lost, err := s.RenewLeases(ctx, l.Owner, []Lease{l}, ttl)
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return fmt.Errorf("renew lease %s: %w", l.Name, ErrLeaseLost)
	}
	return nil
}

// ReleaseLease gives a held lease up so another process can take the unit
// at once instead of waiting for expiry. The row stays, expired, keeping
// its token (see acquireLeaseSQL), with no session (so the next
// acquisition is no takeover).
func (s *Leases) ReleaseLease(ctx context.Context, l Lease) error {
	return s.ReleaseLeases(ctx, l.Owner, []Lease{l})
}

// Fence is the lease a work unit's storage writes carry. A fenced write
// checks, as the last statement of its own transaction, that the lease
// still has Token, and takes a share lock on the lease row until it
// commits: a process that lost the lease (expired while it was paused,
// then taken over) cannot commit anything after the takeover, and a
// takeover waits for a write in flight to end, so the new holder reads
// progress that includes it. Epoch, when set, is the storage run
// (Leases.Epoch) the unit read its progress from: its writes fail with
// ErrStorageRestarted on a later run. The zero Fence checks nothing (a
// process working alone, tests).
type Fence struct {
	Lease string
	Token int64
	Epoch uint64
}

// FenceOf returns the fence of a held lease.
func FenceOf(l Lease) Fence { return Fence{Lease: l.Name, Token: l.Token} }

// fenceSQL is the condition a fenced statement adds: the lease row with
// the token exists, share-locked until commit. $%[1]d and $%[2]d are the
// lease name and token.
const fenceSQL = `EXISTS (SELECT 1 FROM leases WHERE name = $%[1]d AND token = $%[2]d FOR SHARE)`

// CheckFence returns nil while f's lease is held — its token current and
// not expired — and an ErrLeaseLost error when not; the zero Fence is
// always held. It is for steps outside storage that only the holder may
// take (terminating another connection's use of a slot): storage writes
// check their fence in their own transaction.
func (s *Leases) CheckFence(ctx context.Context, f Fence) error {
	if f.Lease == "" {
		return nil
	}
	var held bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM leases WHERE name = $1 AND token = $2 AND expires_at >= now())`,
		f.Lease, f.Token).Scan(&held); err != nil {
		return fmt.Errorf("check lease %s: %w", f.Lease, err)
	}
	if !held {
		return f.lost("check")
	}
	return nil
}

// fenceLost is the error of a fenced write whose check failed.
func (f Fence) lost(what string) error {
	return fmt.Errorf("%s: lease %s (token %d) is no longer held: %w", what, f.Lease, f.Token, ErrLeaseLost)
}

// UnitCounts are the cluster-wide work unit figures autoscaling reads
// (SPEC §5), the same from every process: they come from storage, not
// from any one process's queue.
type UnitCounts struct {
	// TotalStreams counts the groups that stream (ACTIVE or PROCESSING),
	// ActiveStreams those whose stream a live process holds.
	TotalStreams, ActiveStreams int64
	// PendingSnapshots counts snapshot units no process works on: key
	// ranges not done and not leased (or only claimed ahead of their
	// start), and tables not yet planned into ranges; ActiveSnapshots the
	// ranges a live process holds and works on.
	PendingSnapshots, ActiveSnapshots int64
}

// unitCountsSQL computes UnitCounts in one statement. A lease is live
// while it has not expired, its holder's session exists (see
// liveSession) and its unit started (a snapshot unit claimed ahead of its
// start is pending: leasebatch.go).
const unitCountsSQL = `
WITH live AS (
  SELECT name FROM leases l WHERE l.expires_at >= now() AND l.started AND ` + liveHolderSQL + `
), serving AS (
  SELECT id FROM groups WHERE state IN ('ACTIVE', 'PROCESSING')
)
SELECT
  (SELECT count(*) FROM serving),
  (SELECT count(*) FROM serving WHERE 'stream/' || id IN (SELECT name FROM live)),
  (SELECT count(*) FROM snapshot_ranges r JOIN source_tables t ON t.id = r.source_table_id
     WHERE NOT r.done AND t.group_id IN (SELECT id FROM serving)
       AND 'snapshot/' || t.id || '/' || r.range_no NOT IN (SELECT name FROM live))
  + (SELECT count(*) FROM source_tables t WHERE NOT t.snapshot_done AND t.group_id IN (SELECT id FROM serving)
       AND NOT EXISTS (SELECT 1 FROM snapshot_ranges r WHERE r.source_table_id = t.id)),
  (SELECT count(*) FROM snapshot_ranges r JOIN source_tables t ON t.id = r.source_table_id
     WHERE NOT r.done AND t.group_id IN (SELECT id FROM serving)
       AND 'snapshot/' || t.id || '/' || r.range_no IN (SELECT name FROM live))`

// UnitCounts reads the cluster-wide work unit counts.
func (s *Leases) UnitCounts(ctx context.Context) (UnitCounts, error) {
	var c UnitCounts
	if err := s.pool.QueryRow(ctx, unitCountsSQL).Scan(&c.TotalStreams, &c.ActiveStreams, &c.PendingSnapshots, &c.ActiveSnapshots); err != nil {
		return UnitCounts{}, fmt.Errorf("count work units: %w", err)
	}
	return c, nil
}
