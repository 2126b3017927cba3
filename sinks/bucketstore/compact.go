package bucketstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Compaction rewrites a group's published ops so that storage, and what a
// new client downloads, stop growing with every update of a row, without
// changing any bucket's checksum (see doc.go for the op kinds):
//
//   - MOVE: an op of a row that a later op of the same bucket supersedes
//     (same object type, id and source row) keeps its op id and checksum
//     and loses its data. Its target_op is the row's latest op: a client
//     that has read the MOVE holds the row again only once it has read
//     that op, so a checkpoint below it cannot be completed from these ops
//     (the sync API withholds its checkpoint_complete and goes on to a
//     later one, as PowerSync does).
//   - CLEAR: a bucket's leading run of REMOVE, MOVE and CLEAR ops becomes
//     one CLEAR at the run's last op id carrying their summed checksum. A
//     client that reads it drops what it holds of the bucket and takes the
//     CLEAR's checksum as the bucket's sum so far.
//
// A client downloading an older checkpoint while ops are rewritten cannot
// complete it consistently (a CLEAR may have taken ops it had not read
// yet); the group's compaction floor (Validity.CompactFloor) tells the sync API,
// which then completes a later checkpoint instead. Only ops at or below the group's last published
// checkpoint are touched:
// replication writes above it meanwhile, and each transaction here is
// small (CompactOptions.BatchOps), so neither writers nor readers wait on
// compaction for long. A reader that reads a bucket while it is compacted
// sees each batch before or after one transaction, which the rules above
// keep consistent: checksums never change, and a CLEAR replaces exactly
// what it sums.

// CompactOptions bound one compaction of a group.
type CompactOptions struct {
	// Buckets limits it to these buckets; empty: every bucket.
	Buckets []string
	// BatchOps is how many ops one statement reads or one transaction
	// rewrites (default 10000).
	BatchOps int
	// MaxRows bounds the rows remembered per bucket while looking for
	// superseded ops (default 1,000,000, about 100 MB at most): ops of
	// rows beyond it are left as they are, never compacted wrongly.
	MaxRows int
	// MaxBusy is the share of the time compaction works, in (0, 1]:
	// between transactions it pauses so that it is busy at most this
	// share, leaving storage's CPU to replication and reads. 0 or 1:
	// full speed.
	MaxBusy float64
	// Progress, when set, is called after each bucket.
	Progress func(bucket string, st CompactStats)

	pace *pacer
}

func (o CompactOptions) withDefaults() CompactOptions {
	if o.BatchOps <= 0 {
		o.BatchOps = 10000
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 1_000_000
	}
	return o
}

// CompactRun is a completed compaction of a group as storage records it
// (Group.Compaction).
type CompactRun struct {
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration_ns"`
	// Partial: only some buckets were compacted (CompactOptions.Buckets).
	Partial bool `json:"partial,omitempty"`
	CompactStats
}

// CompactStats is what a compaction did.
type CompactStats struct {
	// UpTo is the checkpoint op id the compaction went up to.
	UpTo int64 `json:"up_to"`
	// Buckets counts the buckets looked at.
	Buckets int64 `json:"buckets"`
	// Moved counts ops turned into MOVEs, Cleared the ops merged into
	// CLEARs and deleted, Clears the CLEAR ops written.
	Moved   int64 `json:"moved"`
	Cleared int64 `json:"cleared"`
	Clears  int64 `json:"clears"`
	// Reclaimed is the bytes of ops compaction dropped, measured as
	// pg_column_size of whole bucket_data rows: the rows it deleted, and
	// for each row it rewrote (into a MOVE or a CLEAR) its old size less
	// its new one (a rewrite that does not shrink a row counts 0). These
	// are logical bytes: the space returns to PostgreSQL once (auto)vacuum
	// has processed bucket_data.
	Reclaimed int64 `json:"reclaimed_bytes"`
}

func (st *CompactStats) add(o CompactStats) {
	st.Buckets += o.Buckets
	st.Moved += o.Moved
	st.Cleared += o.Cleared
	st.Clears += o.Clears
	st.Reclaimed += o.Reclaimed
}

// Compact compacts group's ops up to its last published checkpoint, bucket
// by bucket in name order, and records the run in the group
// (Group.Compaction) when it completes. Cancelling ctx stops it between
// transactions; everything done so far stays valid.
func (s *Compactor) Compact(ctx context.Context, group int, o CompactOptions) (CompactStats, error) {
	began := time.Now()
	st, err := s.compact(ctx, group, o)
	if err != nil || st.UpTo == 0 {
		return st, err
	}
	run, err := json.Marshal(CompactRun{At: began.UTC(), Duration: time.Since(began), Partial: len(o.Buckets) > 0, CompactStats: st})
	if err != nil {
		return st, fmt.Errorf("record compaction of group %d: %w", group, err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE groups SET compaction = $2 WHERE id = $1`, group, run); err != nil {
		return st, fmt.Errorf("record compaction of group %d: %w", group, err)
	}
	return st, nil
}

func (s *Compactor) compact(ctx context.Context, group int, o CompactOptions) (CompactStats, error) {
	o = o.withDefaults()
	o.pace = newPacer(o.MaxBusy)
	g, err := s.catalog.Group(ctx, group)
	if err != nil {
		return CompactStats{}, fmt.Errorf("compact group %d: %w", group, err)
	}
	st := CompactStats{UpTo: g.LastCheckpoint}
	if st.UpTo <= 0 {
		return st, nil // nothing published yet
	}
	// The floor commits before any op is rewritten, so that a reader that
	// read a rewrite and then reads the floor sees it (ReadValidity): a
	// client downloading a checkpoint below it does not complete that
	// checkpoint but a later one. (A CLEAR deletes ops a client at an
	// older checkpoint may not have read yet and sits beyond that
	// checkpoint: its reads alone cannot tell.)
	if _, err := s.pool.Exec(ctx, `UPDATE groups SET compact_floor = GREATEST(compact_floor, $2) WHERE id = $1`, group, st.UpTo); err != nil {
		return st, fmt.Errorf("compact group %d: set the floor: %w", group, err)
	}
	lay, err := s.layout(ctx, group)
	if err != nil {
		return st, fmt.Errorf("compact group %d: %w", group, err)
	}
	buckets := slices.Clone(o.Buckets)
	slices.Sort(buckets)
	after, listed := "", len(buckets) > 0
	for {
		if !listed {
			if buckets, err = s.bucketsAfter(ctx, lay, group, after, 100); err != nil {
				return st, err
			}
		}
		keys, err := s.bucketArg(ctx, lay, group, buckets)
		if err != nil {
			return st, fmt.Errorf("compact group %d: %w", group, err)
		}
		for i, b := range buckets {
			var key any = b
			if ids, ok := keys.([]int64); ok {
				key = ids[i]
			}
			bs, err := s.compactBucket(ctx, lay, group, key, st.UpTo, o)
			st.add(bs)
			if err != nil {
				return st, fmt.Errorf("compact bucket %q of group %d: %w", b, group, err)
			}
			if o.Progress != nil {
				o.Progress(b, bs)
			}
		}
		if listed || len(buckets) < 100 {
			return st, nil
		}
		after = buckets[len(buckets)-1]
	}
}

// bucketsAfter lists up to n bucket names of group after after: of v1,
// by a skip scan of the primary key (one index probe per bucket, however
// many ops each holds); of v2, from bucket_names (a name whose write
// failed has no ops, and compacting it finds nothing).
func (s *Compactor) bucketsAfter(ctx context.Context, lay *layout, group int, after string, n int) ([]string, error) {
	q := bucketsAfterSQL
	if lay.interned {
		q = `SELECT name FROM bucket_names WHERE group_id = $1 AND name > $2 ORDER BY name LIMIT $3`
	}
	rows, err := s.pool.Query(ctx, q, group, after, n)
	if err != nil {
		return nil, fmt.Errorf("list buckets of group %d: %w", group, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list buckets of group %d: %w", group, err)
	}
	return names, nil
}

// bucketsAfterSQL is bucketsAfter's skip scan of v1.
const bucketsAfterSQL = `
WITH RECURSIVE b(name) AS (
  (SELECT bucket_name FROM bucket_data WHERE group_id = $1 AND bucket_name > $2 ORDER BY bucket_name LIMIT 1)
  UNION ALL
  SELECT (SELECT bucket_name FROM bucket_data WHERE group_id = $1 AND bucket_name > b.name ORDER BY bucket_name LIMIT 1)
  FROM b WHERE b.name IS NOT NULL
)
SELECT name FROM b WHERE name IS NOT NULL LIMIT $3`

// compactBucket runs both passes on one bucket (bucket: its bucket
// column, the name of v1 or the id of v2).
func (s *Compactor) compactBucket(ctx context.Context, lay *layout, group int, bucket any, upTo int64, o CompactOptions) (CompactStats, error) {
	st := CompactStats{Buckets: 1}
	moved, err := s.moveSuperseded(ctx, lay, group, bucket, upTo, o)
	st.Moved, st.Reclaimed = moved.ops, moved.bytes
	if err != nil {
		return st, err
	}
	for {
		merged, more, err := s.clearLeading(ctx, lay, group, bucket, upTo, o.BatchOps)
		if err != nil {
			return st, err
		}
		if merged.ops > 0 {
			st.Cleared += merged.ops
			st.Clears++
			st.Reclaimed += merged.bytes
		}
		if err := o.pace.rest(ctx); err != nil {
			return st, err
		}
		if !more {
			return st, nil
		}
	}
}

// rowKeySQL identifies an op's row within its bucket as a client keys it:
// object type, object id and the source row (the subkey).
const rowKeySQL = `coalesce(object_type, '') || chr(31) || coalesce({objid}, '') || chr(31) ||
  coalesce(source_table::text, '') || chr(31) || coalesce(source_key::text, '')`

// compactReadDescSQL reads a bucket's ops below $3, newest first.
const compactReadDescSQL = `SELECT op_id, op, ` + rowKeySQL + ` FROM {ops}
	WHERE group_id = $1 AND {bucket} = $2 AND op_id < $3 ORDER BY op_id DESC LIMIT $4`

// readLeadingSQL reads and locks a bucket's first ops up to $3.
const readLeadingSQL = `SELECT op_id, op, checksum, coalesce(target_op, 0) FROM {ops}
	WHERE group_id = $1 AND {bucket} = $2 AND op_id <= $3 ORDER BY op_id LIMIT $4 FOR UPDATE`

// rewritten counts the ops one compaction step rewrote or deleted and the
// row bytes that dropped (CompactStats.Reclaimed).
type rewritten struct {
	ops, bytes int64
}

// moveSQL turns the listed PUT and REMOVE ops ($3, with their targets
// $4) into MOVEs and returns how many it turned and the row bytes that
// dropped, in one statement. RETURNING has no OLD before PostgreSQL 18: the
// CTE locks each row and reads its size before the UPDATE rewrites it
// (under that lock, so the size is of the version rewritten), and
// RETURNING reads the size after. The size is read in the scan of the row
// (a lateral subquery, not flattened): read above a join, whose hash table
// stores the whole row as a value, a row under 127 bytes comes with a
// 1-byte length header and reads 3 bytes short.
const moveSQL = `
WITH old AS (
  SELECT o.op_id, m.target, o.size
  FROM unnest($3::bigint[], $4::bigint[]) AS m(id, target)
  CROSS JOIN LATERAL (
    SELECT d.op_id, pg_column_size(d.*) AS size FROM {ops} d
    WHERE d.group_id = $1 AND d.{bucket} = $2 AND d.op_id = m.id AND d.op IN (1, 2)
    OFFSET 0 FOR UPDATE OF d) o
), moved AS (
  UPDATE {ops} d SET op = 3, data = NULL, target_op = old.target
  FROM old
  WHERE d.group_id = $1 AND d.{bucket} = $2 AND d.op_id = old.op_id
  RETURNING greatest(old.size - pg_column_size(d.*), 0) AS freed
)
SELECT count(*), coalesce(sum(freed), 0)::bigint FROM moved`

// moveSuperseded is the MOVE pass: it reads the bucket's ops from upTo
// down, remembering each row's latest op, and turns every older PUT or
// REMOVE of a remembered row into a MOVE whose target is that latest op.
// It stops at a CLEAR: nothing before one is left to compact.
func (s *Compactor) moveSuperseded(ctx context.Context, lay *layout, group int, bucket any, upTo int64, o CompactOptions) (rewritten, error) {
	latest := map[string]int64{}
	var moved rewritten
	before := upTo + 1
	for {
		rows, err := s.pool.Query(ctx, lay.compactReadDesc, group, bucket, before, o.BatchOps)
		if err != nil {
			return moved, fmt.Errorf("read ops: %w", err)
		}
		var ids, targets []int64
		n, cleared := 0, false
		for rows.Next() {
			var id int64
			var op int16
			var key string
			if err := rows.Scan(&id, &op, &key); err != nil {
				rows.Close()
				return moved, fmt.Errorf("read ops: %w", err)
			}
			n++
			before = id
			if op == OpClear {
				cleared = true
				break
			}
			if op != OpPut && op != OpRemove {
				continue
			}
			if t, ok := latest[key]; ok {
				ids, targets = append(ids, id), append(targets, t)
			} else if len(latest) < o.MaxRows {
				latest[key] = id
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return moved, fmt.Errorf("read ops: %w", err)
		}
		if len(ids) > 0 {
			var step rewritten
			if err := s.pool.QueryRow(ctx, lay.compactMove, group, bucket, ids, targets).Scan(&step.ops, &step.bytes); err != nil {
				return moved, fmt.Errorf("move %d superseded ops: %w", len(ids), err)
			}
			moved.ops += step.ops
			moved.bytes += step.bytes
		}
		if cleared || n < o.BatchOps {
			return moved, o.pace.rest(ctx)
		}
		if err := o.pace.rest(ctx); err != nil {
			return moved, err
		}
	}
}

// clearLeading is one step of the CLEAR pass: in one transaction it reads
// up to batch of the bucket's first ops and merges their leading run of
// REMOVE, MOVE and CLEAR ops into a CLEAR at the run's last op id. more:
// the run went on to the end of what was read, so the next step merges
// this CLEAR with what follows.
func (s *Compactor) clearLeading(ctx context.Context, lay *layout, group int, bucket any, upTo int64, batch int) (merged rewritten, more bool, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lay.compactReadLeading, group, bucket, upTo, batch)
		if err != nil {
			return fmt.Errorf("read leading ops: %w", err)
		}
		var ids []int64
		var sum uint32
		var target int64
		n, stopped := 0, false
		for rows.Next() {
			var id, cs, t int64
			var op int16
			if err := rows.Scan(&id, &op, &cs, &t); err != nil {
				rows.Close()
				return fmt.Errorf("read leading ops: %w", err)
			}
			n++
			if op == OpPut || stopped {
				stopped = true
				continue
			}
			ids = append(ids, id)
			sum += uint32(cs)
			target = max(target, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read leading ops: %w", err)
		}
		more = !stopped && n == batch && len(ids) > 1
		if len(ids) < 2 {
			return nil // nothing to merge
		}
		last := ids[len(ids)-1]
		var deleted, shrunk int64
		if err := tx.QueryRow(ctx, lay.compactDeleteMerged, group, bucket, ids[:len(ids)-1]).Scan(&deleted); err != nil {
			return fmt.Errorf("delete %d merged ops: %w", len(ids)-1, err)
		}
		var t *int64
		if target > last {
			t = &target
		}
		if err := tx.QueryRow(ctx, lay.compactWriteClear, group, bucket, last, lay.checksumArg(sum), t).Scan(&shrunk); err != nil {
			return fmt.Errorf("write CLEAR: %w", err)
		}
		merged = rewritten{ops: int64(len(ids) - 1), bytes: deleted + shrunk}
		return nil
	})
	if err != nil {
		return rewritten{}, false, err
	}
	return merged, more, nil
}

// deleteMergedSQL deletes the ops a CLEAR replaces and returns the row
// bytes they took.
const deleteMergedSQL = `
WITH gone AS (
  DELETE FROM {ops} d WHERE group_id = $1 AND {bucket} = $2 AND op_id = ANY($3)
  RETURNING pg_column_size(d.*) AS size
)
SELECT coalesce(sum(size), 0)::bigint FROM gone`

// writeClearSQL rewrites a run's last op into its CLEAR and returns the
// row bytes that dropped: the row is locked since the run was read, so
// the CTE reads the version the UPDATE rewrites (see moveSQL).
const writeClearSQL = `
WITH old AS (
  SELECT pg_column_size(d.*) AS size FROM {ops} d
  WHERE d.group_id = $1 AND d.{bucket} = $2 AND d.op_id = $3
), cleared AS (
  UPDATE {ops} d SET op = 4, checksum = $4, data = NULL, target_op = $5,
    object_type = NULL, {objnull}, source_table = NULL, source_key = NULL
  FROM old
  WHERE d.group_id = $1 AND d.{bucket} = $2 AND d.op_id = $3
  RETURNING greatest(old.size - pg_column_size(d.*), 0) AS freed
)
SELECT coalesce(sum(freed), 0)::bigint FROM cleared`
