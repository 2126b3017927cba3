package bucketstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// State is a group's lifecycle state.
type State string

// Group states: a new rules version replicates in the background
// (PROCESSING) while the ACTIVE one serves; when it is caught up it becomes
// ACTIVE and the old one STOPs. TERMINATED groups are being cleared.
const (
	StateProcessing State = "PROCESSING"
	StateActive     State = "ACTIVE"
	StateStop       State = "STOP"
	StateTerminated State = "TERMINATED"
)

// Group is one deployed sync rules version.
type Group struct {
	ID                 int
	State              State
	Rules              string
	SlotName           string
	SnapshotDone       bool
	LastCheckpoint     int64 // 0 = none yet
	LastCheckpointLSN  pglogrepl.LSN
	NoCheckpointBefore pglogrepl.LSN
	LastError          string
	LastErrorAt        time.Time // when LastError was reported; zero when there is none
	CreatedAt          time.Time
	// Stream is the stream position storage holds (StreamResume): zero
	// before the group streamed; TxnLSN set while a large source
	// transaction is written in pieces.
	Stream StreamProgress
	// Compaction is the group's last completed compaction (zero: none).
	Compaction CompactRun
	// RulesWarnings are the source's warnings about the group's rules,
	// one line each with file:line (SetRulesWarnings).
	RulesWarnings []string
	// StorageVersion is the layout of the group's ops and current rows
	// (see doc.go, "Storage versions"): 1 for groups created before
	// layout 2 existed, 2 for the others.
	StorageVersion int
}

// Serving reports whether the group is ACTIVE or PROCESSING: it streams,
// and its storage is read or about to be.
func (g Group) Serving() bool { return g.State == StateActive || g.State == StateProcessing }

// ErrNoGroup is returned when a group does not exist.
var ErrNoGroup = errors.New("no such replication group")

// ErrGroupStopped is returned (wrapped) by Commit for a group that was
// stopped — replaced by a newer group that took over — or terminated: its
// replication should end and its data be cleared. The sync API's loads
// (ParameterRows, the ChecksumCache) return it too for such a group, whose
// storage may be cleared under their reads: nothing of it is served any
// more.
var ErrGroupStopped = errors.New("replication group stopped")

// createGroupSQL inserts a PROCESSING group ($1 rules) whose slot name is
// $2 prefix + id + '_' + $3 random suffix, of storage version $4.
const createGroupSQL = `
	WITH n AS (SELECT nextval(pg_get_serial_sequence('groups', 'id'))::int AS id)
	INSERT INTO groups (id, rules, slot_name, storage_version)
	SELECT id, $1, $2 || id || '_' || $3, $4 FROM n
	RETURNING id`

// CreateGroup stores a new rules version as a PROCESSING group with a fresh
// replication slot name (prefix + id + 4 random hex digits, so a re-created
// group never reuses a dropped slot's name), in the current storage
// layout (from v2: with its partitions).
func (s *Catalog) CreateGroup(ctx context.Context, rules, slotPrefix string) (Group, error) {
	return s.createGroup(ctx, rules, slotPrefix, CurrentStorageVersion)
}

// createGroup is CreateGroup in storage layout version: tests make v1
// groups with it, which storage written by earlier versions holds.
func (s *Catalog) createGroup(ctx context.Context, rules, slotPrefix string, version int) (Group, error) {
	var id int
	// Durable: the group's slot is created on the source under its name.
	err := durably(ctx, s.pool, func(tx pgx.Tx) (err error) {
		id, err = insertGroup(ctx, tx, rules, slotPrefix, version)
		return err
	})
	if err != nil {
		return Group{}, fmt.Errorf("create group: %w", err)
	}
	return s.Group(ctx, id)
}

// insertGroup inserts a group in tx and, from v2, creates its partitions
// in the same transaction: a group is never without them.
func insertGroup(ctx context.Context, tx pgx.Tx, rules, slotPrefix string, version int) (int, error) {
	var id int
	if err := tx.QueryRow(ctx, createGroupSQL, rules, slotPrefix, randomHex(2), version).Scan(&id); err != nil {
		return 0, err
	}
	if version >= storageV2 {
		if _, err := tx.Exec(ctx, createPartitionsSQL(id, version)); err != nil {
			return 0, fmt.Errorf("create the partitions of group %d: %w", id, err)
		}
	}
	return id, nil
}

const groupColumns = `id, state, rules, slot_name, snapshot_done, coalesce(last_checkpoint, 0),
	coalesce(last_checkpoint_lsn, '0/0'), coalesce(no_checkpoint_before, '0/0'), coalesce(last_error, ''), last_error_at, created_at,
	coalesce(stream_lsn, '0/0'), coalesce(stream_txn_lsn, '0/0'), stream_txn_changes, compaction, rules_warnings, storage_version`

func scanGroup(row pgx.Row) (Group, error) {
	var g Group
	var lcl, ncb string
	var errAt *time.Time
	var compaction []byte
	err := row.Scan(&g.ID, &g.State, &g.Rules, &g.SlotName, &g.SnapshotDone, &g.LastCheckpoint,
		&lcl, &ncb, &g.LastError, &errAt, &g.CreatedAt, &g.Stream.LSN, &g.Stream.TxnLSN, &g.Stream.TxnChanges, &compaction, &g.RulesWarnings, &g.StorageVersion)
	if err != nil {
		return g, err
	}
	if compaction != nil {
		if err := json.Unmarshal(compaction, &g.Compaction); err != nil {
			return g, fmt.Errorf("group %d: stored compaction: %w", g.ID, err)
		}
	}
	if errAt != nil {
		g.LastErrorAt = *errAt
	}
	g.LastCheckpointLSN, _ = pglogrepl.ParseLSN(lcl)
	g.NoCheckpointBefore, _ = pglogrepl.ParseLSN(ncb)
	return g, nil
}

// SetRulesWarnings stores the source's warnings about the rules of the
// serving groups (PROCESSING or ACTIVE) whose rules are rules, replacing
// what they held: status shows them with the group.
func (s *Catalog) SetRulesWarnings(ctx context.Context, rules string, warnings []string) error {
	if warnings == nil {
		warnings = []string{}
	}
	_, err := s.pool.Exec(ctx, `UPDATE groups SET rules_warnings = $2
		WHERE rules = $1 AND state IN ('PROCESSING', 'ACTIVE')`, rules, warnings)
	if err != nil {
		return fmt.Errorf("store the rules' warnings: %w", err)
	}
	return nil
}

// retiringSQL selects the groups whose retirement is due (STOP) or
// unfinished: TERMINATED ones that still hold source tables (deleted after
// everything else of theirs but bucket names), bucket names (deleted
// last) or a partition (named as partitions names them).
const retiringSQL = `SELECT ` + groupColumns + ` FROM groups g WHERE state = 'STOP' OR (state = 'TERMINATED' AND (
	EXISTS (SELECT 1 FROM source_tables t WHERE t.group_id = g.id) OR EXISTS (SELECT 1 FROM bucket_names n WHERE n.group_id = g.id)
	OR to_regclass('bucket_data2_g' || g.id) IS NOT NULL OR to_regclass('current_data2_g' || g.id) IS NOT NULL
	OR to_regclass('current_data3_g' || g.id) IS NOT NULL))
	ORDER BY id`

// Retiring lists the groups to retire, oldest first: the stopped ones,
// and the terminated ones whose storage is not cleared yet — Terminate
// marks a group TERMINATED before it clears it, so a retire cut off by a
// restart (or a partition detach still waiting for readers) is finished
// by the next process that looks, while Groups leaves terminated groups
// out.
func (s *Catalog) Retiring(ctx context.Context) ([]Group, error) {
	return s.listGroups(ctx, retiringSQL, "list groups to retire")
}

// listGroups reads the groups query q returns (groupColumns); what names
// the operation in errors.
func (s *Catalog) listGroups(ctx context.Context, q, what string) ([]Group, error) {
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	gs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Group, error) { return scanGroup(r) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return gs, nil
}

// Group reads one group.
func (s *Catalog) Group(ctx context.Context, id int) (Group, error) {
	g, err := scanGroup(s.pool.QueryRow(ctx, "SELECT "+groupColumns+" FROM groups WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return g, fmt.Errorf("group %d: %w", id, ErrNoGroup)
	}
	if err != nil {
		return g, fmt.Errorf("read group %d: %w", id, err)
	}
	return g, nil
}

// Groups lists the groups that are not terminated, oldest first.
func (s *Catalog) Groups(ctx context.Context) ([]Group, error) {
	return s.listGroups(ctx, "SELECT "+groupColumns+" FROM groups WHERE state <> 'TERMINATED' ORDER BY id", "list groups")
}

// SetState moves a group to state.
func (s *Catalog) SetState(ctx context.Context, id int, state State) error {
	tag, err := s.pool.Exec(ctx, "UPDATE groups SET state = $2, updated_at = now() WHERE id = $1", id, string(state))
	if err != nil {
		return fmt.Errorf("set group %d state %s: %w", id, state, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("group %d: %w", id, ErrNoGroup)
	}
	return nil
}

// ReportError records a replication error on the group. It is a plain
// autocommit update, never part of a write transaction: an error row
// updated inside concurrent REPEATABLE READ writers made them conflict.
func (s *Catalog) ReportError(ctx context.Context, id int, msg string) error {
	_, err := s.pool.Exec(ctx, "UPDATE groups SET last_error = $2, last_error_at = now() WHERE id = $1", id, msg)
	if err != nil {
		return fmt.Errorf("report error on group %d: %w", id, err)
	}
	return nil
}

// ClearError clears the group's recorded error, if any (autocommit, and a
// no-op write when there is nothing to clear).
func (s *Catalog) ClearError(ctx context.Context, id int) error {
	_, err := s.pool.Exec(ctx, "UPDATE groups SET last_error = NULL, last_error_at = NULL WHERE id = $1 AND last_error IS NOT NULL", id)
	if err != nil {
		return fmt.Errorf("clear error on group %d: %w", id, err)
	}
	return nil
}

// MarkSnapshotDone records that every table of the group is snapshotted and
// raises no_checkpoint_before to lsn: the stream must pass the point at
// which the last snapshot read finished before a checkpoint is consistent.
func (s *Catalog) MarkSnapshotDone(ctx context.Context, id int, lsn pglogrepl.LSN) error {
	var tag pgconn.CommandTag
	err := durably(ctx, s.pool, func(tx pgx.Tx) (err error) {
		tag, err = tx.Exec(ctx, `
		UPDATE groups SET snapshot_done = true,
		  no_checkpoint_before = GREATEST(coalesce(no_checkpoint_before, '0/0'), $2::pg_lsn),
		  updated_at = now()
		WHERE id = $1 AND NOT EXISTS (
		  SELECT 1 FROM source_tables WHERE group_id = $1 AND NOT snapshot_done)`, id, lsn.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("mark snapshot done for group %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("mark snapshot done for group %d: a table's snapshot is not done (or no such group)", id)
	}
	return nil
}

// EnsureGroup makes sure a group replicates the given rules in the
// current storage layout and returns the groups to replicate, oldest
// first: the ACTIVE group (serving clients) and, when the rules changed or
// the active group's storage version is older than CurrentStorageVersion,
// a PROCESSING group that replicates the rules in the current layout in
// the background until it is caught up and takes over. A PROCESSING group
// for rules that are no longer configured, or of an older layout, is
// stopped.
//
// Processes starting at once are serialised by an advisory lock, so that
// they agree on one group per rules version instead of each creating its
// own.
func (s *Catalog) EnsureGroup(ctx context.Context, rules, slotPrefix string) ([]Group, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("ensure group: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, 0)", ensureGroupLockClass); err != nil {
		conn.Conn().Close(context.Background()) // the lock's state is unknown: drop the session with it
		return nil, fmt.Errorf("ensure group: lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1, 0)", ensureGroupLockClass); err != nil {
			conn.Conn().Close(uctx)
		}
	}()
	return s.ensureGroup(ctx, rules, slotPrefix)
}

// ensureGroupLockClass is the first key of the advisory lock EnsureGroup
// holds.
const ensureGroupLockClass = 0x5347 // "SG"

// CurrentStorageVersion is the storage layout of every group created now
// (see doc.go, "Storage versions"). An ACTIVE group of an older version
// moves to it through a new group (EnsureGroup).
const CurrentStorageVersion = storageV3

func (s *Catalog) ensureGroup(ctx context.Context, rules, slotPrefix string) ([]Group, error) {
	groups, err := s.Groups(ctx)
	if err != nil {
		return nil, err
	}
	var active *Group
	// current: a group of the rules in the current layout exists, ACTIVE,
	// or PROCESSING (a rules change or ReplaceGroup's replacement, which
	// goes on).
	var current bool
	for i := range groups {
		g := &groups[i]
		upToDate := g.Rules == rules && g.StorageVersion == CurrentStorageVersion
		switch {
		case g.State == StateActive:
			active = g
			current = current || upToDate
		case g.State == StateProcessing && upToDate:
			current = true
		case g.State == StateProcessing:
			// It serves nobody: other rules, or a layout a new group
			// would move from again once it took over.
			if err := s.SetState(ctx, g.ID, StateStop); err != nil {
				return nil, err
			}
			g.State = StateStop
		}
	}
	if !current {
		ng, err := s.CreateGroup(ctx, rules, slotPrefix)
		if err != nil {
			return nil, err
		}
		if active != nil && active.Rules == rules {
			// Only the process that creates the group says so: the others
			// find it current.
			s.log.Info(fmt.Sprintf("storage version %d → %d: re-snapshot in the background; clients are served from group %d meanwhile",
				active.StorageVersion, ng.StorageVersion, active.ID),
				"group", ng.ID, "storage_version", ng.StorageVersion, "serving_group", active.ID, "serving_storage_version", active.StorageVersion)
		}
		groups = append(groups, ng)
	}
	var out []Group
	for _, g := range groups {
		if g.Serving() {
			out = append(out, g)
		}
	}
	return out, nil
}

// ReplaceGroup starts over a group that can no longer stream because its
// replication slot was lost or dropped: it creates a PROCESSING group with
// the same rules and a new slot name, which snapshots afresh while old
// keeps serving its last checkpoint, and takes over at its first
// checkpoint. If a PROCESSING group of those rules exists already (another
// process got there first), that one is returned with created false.
func (s *Catalog) ReplaceGroup(ctx context.Context, old Group, slotPrefix string) (g Group, created bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Serialise replacements across processes.
		if _, err := tx.Exec(ctx, "LOCK TABLE groups IN SHARE ROW EXCLUSIVE MODE"); err != nil {
			return err
		}
		var id int
		err := tx.QueryRow(ctx, `SELECT id FROM groups WHERE state = 'PROCESSING' AND rules = $1 AND id <> $2
			ORDER BY id DESC LIMIT 1`, old.Rules, old.ID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			id, err = insertGroup(ctx, tx, old.Rules, slotPrefix, CurrentStorageVersion)
			created = true
		}
		if err != nil {
			return err
		}
		g, err = scanGroup(tx.QueryRow(ctx, "SELECT "+groupColumns+" FROM groups WHERE id = $1", id))
		return err
	})
	if err != nil {
		return Group{}, false, fmt.Errorf("replace group %d: %w", old.ID, err)
	}
	return g, created, nil
}

// SnapshotStarted reports whether any snapshot progress of group is stored.
// Until then a group whose slot vanished may simply create it again.
func (s *Catalog) SnapshotStarted(ctx context.Context, group int) (bool, error) {
	var started bool
	err := s.pool.QueryRow(ctx, `SELECT g.snapshot_done OR EXISTS (
			SELECT 1 FROM snapshot_ranges r JOIN source_tables t ON t.id = r.source_table_id
			WHERE t.group_id = g.id AND (r.rows_done > 0 OR r.done))
		FROM groups g WHERE g.id = $1`, group).Scan(&started)
	if err != nil {
		return false, fmt.Errorf("read snapshot progress of group %d: %w", group, err)
	}
	return started, nil
}
