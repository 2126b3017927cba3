package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Snapshot range units are many and most are small (a table of a few
// chunks is one unit), so their leases are claimed, renewed and released
// in batches: a claim looks at many units in one statement and takes
// several, and one statement renews every snapshot lease a process holds.
// Each unit keeps its own lease row and token, so fencing (Fence) is the
// same as for a lease taken alone.

// SnapshotUnit names a snapshot range unit and its lease.
type SnapshotUnit struct {
	Lease   string
	TableID string
	RangeNo int
}

// UnitClaim is what ClaimSnapshotUnits found for one unit: its range is
// Done, another live process holds it (Elsewhere), this owner holds it now
// (Claimed, with Lease), or none of these (free, beyond the claim's limit).
type UnitClaim struct {
	Unit      SnapshotUnit
	Done      bool
	Elsewhere bool
	// Idle is set with Elsewhere when the other process claimed the unit
	// ahead and has not started it: a claim that steals may take it.
	Idle    bool
	Claimed bool
	Lease   Lease
	// TableDone: the unit's table is marked snapshot done
	// (MarkTableSnapshotDone), so a process that finds the table's last
	// range done elsewhere need not mark it again.
	TableDone bool
}

// claimUnitsSQL reads the state of every unit of $1–$3 and takes the
// leases of the first $8 that are neither done nor held by a live other
// owner (that has started it, when $9 says steal), as acquireLeaseSQL
// takes one, not started (a unit's sink marks its lease started as it
// resumes: see Sink.Resume). The units held elsewhere are left out of the
// upsert, so it does not wait for their fenced writes.
const claimUnitsSQL = `
WITH u AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS u(name, table_id, range_no, ord)
), st AS (
  SELECT u.name, u.ord, coalesce(r.done, false) AS done, h.started AS started_elsewhere,
    h.name IS NOT NULL AND (h.started OR NOT $9) AS elsewhere, coalesce(t.snapshot_done, false) AS table_done
  FROM u LEFT JOIN snapshot_ranges r ON r.source_table_id = u.table_id AND r.range_no = u.range_no
  LEFT JOIN source_tables t ON t.id = u.table_id
  LEFT JOIN LATERAL (SELECT l.name, l.started FROM leases l
    WHERE l.name = u.name AND l.owner <> $4 AND l.expires_at >= now() AND ` + liveHolderSQL + `) h ON true
), claimed AS (
  INSERT INTO leases AS l (name, owner, token, expires_at, pid, backend_start, started)
  SELECT c.name, $4, 1, now() + $5::interval, $6, $7, false
  FROM (SELECT name FROM st WHERE NOT done AND NOT elsewhere ORDER BY ord LIMIT $8) c
  ON CONFLICT (name) DO UPDATE SET ` + takeLeaseSetSQL + `,
      started = l.started AND l.owner = EXCLUDED.owner AND l.expires_at >= now()
  WHERE ` + leaseFreeSQL + ` OR $9 AND NOT l.started
  RETURNING l.name, l.token, l.taken_over
)
SELECT st.done, st.elsewhere, coalesce(NOT st.started_elsewhere, false), c.token, coalesce(c.taken_over, false), st.table_done
FROM st LEFT JOIN claimed c ON c.name = st.name ORDER BY st.ord`

// ClaimSnapshotUnits reads the state of units (distinct leases) and claims
// for owner, for ttl, the first limit of them that are free: not done and
// not held by another owner's live process — or, when steal is set, held
// by one that claimed them ahead and has not started them (a process with
// nothing else to do takes them, rather than wait while the other works
// through its own). The answers are in the order of units. A unit whose lease row a takeover would have to wait for
// longer than leaseLockTimeout fails the whole claim (try again later).
func (s *Leases) ClaimSnapshotUnits(ctx context.Context, owner string, ttl time.Duration, units []SnapshotUnit, limit int, steal bool) ([]UnitClaim, error) {
	names := make([]string, len(units))
	tables := make([]string, len(units))
	nos := make([]int32, len(units))
	for i, u := range units {
		names[i], tables[i], nos[i] = u.Lease, u.TableID, int32(u.RangeNo)
	}
	out := make([]UnitClaim, 0, len(units))
	err := s.onLiveSession(ctx, func(c *pgxpool.Conn, id sessionID) error {
		rows, err := c.Query(ctx, claimUnitsSQL, names, tables, nos, owner, ttl.String(), id.pid, id.start, limit, steal)
		if err != nil {
			return err
		}
		out = out[:0]
		for i := 0; rows.Next(); i++ {
			if i >= len(units) {
				rows.Close()
				return errors.New("more answers than units")
			}
			uc := UnitClaim{Unit: units[i]}
			var token *int64
			if err := rows.Scan(&uc.Done, &uc.Elsewhere, &uc.Idle, &token, &uc.Lease.Takeover, &uc.TableDone); err != nil {
				rows.Close()
				return err
			}
			if token != nil {
				uc.Claimed = true
				uc.Lease.Name, uc.Lease.Owner, uc.Lease.Token = units[i].Lease, owner, *token
			}
			out = append(out, uc)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("claim %d snapshot units: %w", len(units), err)
	}
	return out, nil
}

// onLiveSession runs f on the lease session (see liveSession), opening it
// first if need be; the session waits at most leaseLockTimeout for a
// lease row, so a statement run here needs no transaction of its own to
// bound that wait. A session that broke under f is replaced next time.
func (s *Leases) onLiveSession(ctx context.Context, f func(c *pgxpool.Conn, id sessionID) error) error {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.live == nil {
		if err := s.openLiveLocked(ctx); err != nil {
			return err
		}
	}
	err := f(s.live, s.liveID)
	if err != nil && s.live.Conn().IsClosed() {
		s.dropLiveLocked()
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return fmt.Errorf("a lease row stayed locked for %s (a fenced write of its holder is committing): %w", leaseLockTimeout, err)
	}
	return err
}

// RenewLeases extends every lease of held (all owner's) in one statement
// and returns the names it could not renew: they expired, or were taken
// by another owner or released.
func (s *Leases) RenewLeases(ctx context.Context, owner string, held []Lease, ttl time.Duration) (lost []string, err error) {
	if len(held) == 0 {
		return nil, nil
	}
	id, err := s.liveSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(held), err)
	}
	names, tokens := leaseArrays(held)
	rows, err := s.pool.Query(ctx, `UPDATE leases SET expires_at = now() + $4::interval, pid = $5, backend_start = $6
		FROM unnest($2::text[], $3::bigint[]) AS h(name, token)
		WHERE leases.name = h.name AND leases.token = h.token AND leases.owner = $1 AND leases.expires_at >= now()
		RETURNING leases.name`, owner, names, tokens, ttl.String(), id.pid, id.start)
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(held), err)
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(held), err)
	}
	kept := make(map[string]bool, len(renewed))
	for _, n := range renewed {
		kept[n] = true
	}
	for _, l := range held {
		if !kept[l.Name] {
			lost = append(lost, l.Name)
		}
	}
	return lost, nil
}

// ReleaseLeases gives up every lease of held (all owner's) in one
// statement: each row stays, expired and keeping its token, with no
// session, so the next acquisition is no takeover.
func (s *Leases) ReleaseLeases(ctx context.Context, owner string, held []Lease) error {
	if len(held) == 0 {
		return nil
	}
	names, tokens := leaseArrays(held)
	// Without a table alias, so that the statement reads as a release in
	// pg_stat_statements (benchmarks' statementKind) as the single one did.
	_, err := s.pool.Exec(ctx, `UPDATE leases SET expires_at = now() - interval '1 second', pid = NULL, backend_start = NULL
		FROM unnest($2::text[], $3::bigint[]) AS h(name, token)
		WHERE leases.name = h.name AND leases.token = h.token AND leases.owner = $1`, owner, names, tokens)
	if err != nil {
		return fmt.Errorf("release %d leases: %w", len(held), err)
	}
	return nil
}

// leaseArrays is held's names and tokens, for unnest.
func leaseArrays(held []Lease) ([]string, []int64) {
	names := make([]string, len(held))
	tokens := make([]int64, len(held))
	for i, l := range held {
		names[i], tokens[i] = l.Name, l.Token
	}
	return names, tokens
}
