package bucketstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// reserveSQL claims, before a writer allocates op ids, that it may commit
// ids from the sequence's next value on. It runs in autocommit so that the
// claim is visible to checkpoint publishers while the write is in flight.
// The backend identity lets publishers ignore claims of dead connections
// (whose transactions rolled back, so they can commit nothing).
const reserveSQL = `
INSERT INTO op_reservations (group_id, low, backend_start)
SELECT $1, CASE WHEN is_called THEN last_value + 100 ELSE last_value END, -- opIDBlock
       (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())
FROM op_id_seq
RETURNING id`

// releaseSQL drops a claim; run inside the write transaction it makes the
// claim disappear atomically with the ops becoming visible.
const releaseSQL = `DELETE FROM op_reservations WHERE id = $1`

// fencedReleaseSQL is releaseSQL for a fenced writer: it deletes the claim
// only while the writer's lease holds ($2, $3; see Fence), so a writer
// whose lease was taken over sees no row deleted and rolls back.
var fencedReleaseSQL = releaseSQL + " AND " + fmt.Sprintf(fenceSQL, 2, 3)

// liveLowSQL is the lowest op id any live writer of the group may still
// commit, or NULL.
const liveLowSQL = `
SELECT min(r.low) FROM op_reservations r
WHERE r.group_id = $1 AND EXISTS (
  SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.pid AND a.backend_start = r.backend_start)`

// clearStatusSQL makes the next read of pg_stat_activity in the
// transaction see the current backends: PostgreSQL reads that list once
// per transaction, at its first use.
const clearStatusSQL = `SELECT pg_stat_clear_snapshot()`

// dropDeadSQL removes claims of connections that no longer exist.
const dropDeadSQL = `
DELETE FROM op_reservations r
WHERE r.group_id = $1 AND NOT EXISTS (
  SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.pid AND a.backend_start = r.backend_start)`

// Checkpoint is a published consistent point of a group: every op with
// op_id ≤ OpID is committed, and the data reflects the source at LSN.
type Checkpoint struct {
	GroupID int           `json:"group_id"`
	OpID    int64         `json:"checkpoint"`
	LSN     pglogrepl.LSN `json:"-"`
	LSNText string        `json:"lsn"`
}

// Commit tries to publish a checkpoint for group at source position lsn,
// covering ops up to opID that the caller has durably written (0 for a
// keepalive with nothing new). It publishes only when
//
//   - the group's snapshot is done for every table, no source transaction
//     is half written (StreamProgress.TxnLSN) and no table is being re-read
//     (ResnapshotProgress),
//   - lsn ≥ the group's no_checkpoint_before and its last checkpoint LSN, and
//   - no live writer of the group may still commit an op id ≤ the new
//     checkpoint (the checkpoint invariant; see doc.go).
//
// Otherwise opID is parked in keepalive_op and folded into the next
// checkpoint that can be published. The first checkpoint of a PROCESSING
// group activates it and stops the previously active group. New checkpoints
// are announced with pg_notify on NotifyChannel, and are durable when
// Commit returns, whatever the session's synchronous_commit.
func (s *Writes) Commit(ctx context.Context, group int, lsn pglogrepl.LSN, opID int64) (cp Checkpoint, published bool, err error) {
	return s.commit(ctx, group, lsn, opID, Fence{}, false)
}

// commit is Commit, fenced with f: a storage run (Fence.Epoch; 0: any)
// and a lease (Fence.Lease; "": none). With latest set, opID is ignored
// and the checkpoint covers every op id issued so far (lastIssuedSQL,
// read in the transaction).
func (s *Writes) commit(ctx context.Context, group int, lsn pglogrepl.LSN, opID int64, f Fence, latest bool) (cp Checkpoint, published bool, err error) {
	what := fmt.Sprintf("commit group %d at %s", group, lsn)
	conn, err := s.acquire(ctx, f.Epoch, what)
	if err != nil {
		return Checkpoint{}, false, err
	}
	defer conn.Release()
	var g groupCommit
	t := batchTx{
		head: func(b *pgx.Batch) {
			g = groupCommit{group: group, lsn: lsn, opID: opID, fence: f}
			g.queueRead(b, latest)
		},
		body: func(_ pgx.Tx, tail *pgx.Batch) error { return g.decide(s, tail) },
	}
	if err := retry(ctx, &s.counters.retries, func() error { return t.run(ctx, conn) }); err != nil {
		return Checkpoint{}, false, fmt.Errorf("%s: %w", what, err)
	}
	if !g.held {
		return Checkpoint{}, false, f.lost(what)
	}
	return g.cp, g.published, nil
}

// groupCommit is one attempt of commit: what it read of the group, and
// what it decided.
type groupCommit struct {
	group int
	lsn   pglogrepl.LSN
	opID  int64
	fence Fence

	// held: the fence's lease is held (share-locked until the commit).
	held bool

	state                     State
	snapshotDone, halfWritten bool
	last, keep                int64
	lastLSNText, noBeforeText string
	liveLow                   *int64

	cp        Checkpoint
	published bool
}

// queueRead queues locking and reading the group row, then the live
// writers' claims.
func (g *groupCommit) queueRead(b *pgx.Batch, latest bool) {
	if latest {
		// Read after the caller's ops committed, before the claims.
		b.Queue(`SELECT ` + lastIssuedSQL).QueryRow(func(r pgx.Row) error {
			if err := r.Scan(&g.opID); err != nil {
				return fmt.Errorf("read op id sequence: %w", err)
			}
			return nil
		})
	}
	// A source transaction written in pieces, or a table being re-read,
	// leaves storage between two consistent states (halfWritten).
	b.Queue(`
		SELECT state, snapshot_done, coalesce(last_checkpoint, 0), coalesce(keepalive_op, 0),
		       coalesce(last_checkpoint_lsn, '0/0')::text, coalesce(no_checkpoint_before, '0/0')::text,
		       stream_txn_lsn IS NOT NULL OR EXISTS (SELECT 1 FROM source_tables t WHERE t.group_id = g.id AND t.resnapshot)
		FROM groups g WHERE id = $1 FOR UPDATE`, g.group).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&g.state, &g.snapshotDone, &g.last, &g.keep, &g.lastLSNText, &g.noBeforeText, &g.halfWritten); err != nil {
			return fmt.Errorf("lock group %d: %w", g.group, err)
		}
		return nil
	})
	// Read the claims only now, after the caller's ops committed: a writer
	// holding a lower uncommitted id claimed it before allocating, hence
	// before our ops got their ids, so its claim is visible to this
	// statement's snapshot.
	b.Queue(liveLowSQL, g.group).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&g.liveLow); err != nil {
			return fmt.Errorf("read op reservations: %w", err)
		}
		return nil
	})
	g.held = g.fence.Lease == ""
	if g.held {
		return
	}
	// A stream position recorded here is one the process may then confirm
	// to the source. Once another process took the stream over and read
	// the position to resume from, a commit of the old holder must not move
	// it on: the slot would be confirmed past where the new holder starts
	// (logrepl.ErrSlotAhead). The share lock makes a takeover wait for this
	// commit, so the new holder reads what it recorded.
	b.Queue(`SELECT `+fmt.Sprintf(fenceSQL, 1, 2), g.fence.Lease, g.fence.Token).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&g.held); err != nil {
			return fmt.Errorf("check lease %s: %w", g.fence.Lease, err)
		}
		return nil
	})
}

// decide queues on tail what the read state calls for: parking the op id
// in keepalive_op, a keepalive, or publishing a checkpoint.
func (g *groupCommit) decide(s *Writes, tail *pgx.Batch) error {
	if !g.held {
		return nil // commit reports the lost lease; the transaction changes nothing
	}
	if g.state == StateStop || g.state == StateTerminated {
		return fmt.Errorf("group %d is %s: %w", g.group, g.state, ErrGroupStopped)
	}
	lastLSN, _ := pglogrepl.ParseLSN(g.lastLSNText)
	noBefore, _ := pglogrepl.ParseLSN(g.noBeforeText)
	candidate := max(g.last, g.keep, g.opID)
	can := g.snapshotDone && !g.halfWritten && g.lsn >= noBefore && g.lsn >= lastLSN &&
		(g.liveLow == nil || candidate < *g.liveLow)
	lsn := g.lsn.String()
	if !can {
		tail.Queue(`UPDATE groups SET keepalive_op = GREATEST(coalesce(keepalive_op, 0), $2::bigint),
			stream_lsn = GREATEST(coalesce(stream_lsn, '0/0'), $3::pg_lsn), last_keepalive_at = now()
			WHERE id = $1`, g.group, g.opID, lsn)
		return nil
	}
	if candidate == g.last && g.lsn == lastLSN {
		g.cp = Checkpoint{GroupID: g.group, OpID: g.last, LSN: g.lsn, LSNText: lsn}
		tail.Queue(`UPDATE groups SET last_keepalive_at = now(),
			stream_lsn = GREATEST(coalesce(stream_lsn, '0/0'), $2::pg_lsn) WHERE id = $1`, g.group, lsn)
		return nil
	}
	// A published checkpoint is durable: clients download it at once, so
	// a storage crash must not take back its ops (writers may commit with
	// synchronous_commit=off). Waiting for this commit's WAL flush covers
	// every earlier commit, and readers see the checkpoint only after the
	// flush.
	tail.Queue("SET LOCAL synchronous_commit = on")
	tail.Queue(`
		UPDATE groups SET last_checkpoint = $2, last_checkpoint_lsn = $3::pg_lsn, keepalive_op = NULL,
		  stream_lsn = GREATEST(coalesce(stream_lsn, '0/0'), $3::pg_lsn),
		  state = CASE WHEN state = 'PROCESSING' THEN 'ACTIVE' ELSE state END,
		  last_keepalive_at = now(), updated_at = now()
		WHERE id = $1`, g.group, candidate, lsn)
	if g.state == StateProcessing {
		// The first checkpoint of a new group stops the one it replaces.
		tail.Queue(`UPDATE groups SET state = 'STOP', updated_at = now() WHERE state = 'ACTIVE' AND id <> $1`, g.group)
	}
	g.cp = Checkpoint{GroupID: g.group, OpID: candidate, LSN: g.lsn, LSNText: lsn}
	payload, _ := json.Marshal(g.cp)
	tail.Queue("SELECT pg_notify($1, $2)", s.notifyChannel(), string(payload))
	// Claims of dead connections are ignored above; forget them. The
	// backend list liveLowSQL read is this transaction's: a writer whose
	// connection opened since, and that claimed ids since, is not in it.
	tail.Queue(clearStatusSQL)
	tail.Queue(dropDeadSQL, g.group)
	s.queuePrune(tail, g.group, candidate)
	g.published = true
	return nil
}
