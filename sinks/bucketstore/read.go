package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncpipe/syncpipe/stages/checksum"
)

// BucketRequest asks for the ops of one bucket after op id After (0 = from
// the start of the bucket).
type BucketRequest struct {
	Bucket string
	After  int64
}

// OpRow is one op as the sync protocol sends it.
//
// The string fields are ordinary Go strings the caller may keep. Data
// aliases a buffer owned by the database driver and is valid only during
// the callback that receives the row: copy it to keep it.
type OpRow struct {
	// Bucket is the requested bucket name (the very string of the request).
	Bucket string
	OpID   int64
	// Op is OpPut, OpRemove, OpMove or OpClear.
	Op         int16
	ObjectType string
	ObjectID   string
	// Subkey is "<source table id>/<replica id>", recomputed from the
	// stored source row; empty for ops that carry no row (compacted MOVE
	// and CLEAR ops).
	Subkey string
	// Data is the row as JSON text for PUT; nil for REMOVE, MOVE and CLEAR.
	Data []byte
	// Checksum is the op's checksum (the sum of what it replaced for CLEAR).
	Checksum uint32
	// TargetOp is set by compaction on MOVE and CLEAR ops (0 otherwise): a
	// batch holding TargetOp above the checkpoint cannot complete it.
	TargetOp int64
}

// readBucketDataSQL reads, in one round trip, the ops of many buckets.
// Requests are numbered in request order; the OFFSET 0 fence keeps the
// planner from flattening that ordered subquery, so the join is a nested
// loop over the requests in order. Each request is joined to an index range
// scan of its bucket on bucket_data's primary key, in op id order, that
// stops after $5 rows; the outer LIMIT stops the whole scan once $5 rows
// are produced, so buckets after that point are never touched. $5 is the
// caller's limit + 1: the extra row tells whether more remain.
//
// The outer ORDER BY names only r.ord, which the nested loop's outer side
// already delivers, so there is no sort. (ORDER BY r.ord, b.op_id makes
// PostgreSQL add an Incremental Sort that reads the whole next bucket
// before it can cut at the limit: TestReadBucketDataPlan.) Op id order
// within a bucket comes from the lateral subquery's ORDER BY, which a
// nested loop preserves but SQL does not promise, so ReadBucketData checks
// it on every row and fails loudly rather than return a wrong page. It is
// a template (see newLayout).
const readBucketDataSQL = `
SELECT r.ord, b.op_id, b.op, b.source_table, b.source_key, b.object_type, b.object_id, b.checksum, b.data, b.target_op
FROM (SELECT * FROM unnest($2::{btype}[], $3::int8[]) WITH ORDINALITY AS u(bucket, after, ord) ORDER BY ord OFFSET 0) r
CROSS JOIN LATERAL (
  SELECT d.op_id, d.op, d.source_table, d.source_key, d.object_type, {d.objid}, d.checksum, d.data, d.target_op
  FROM {ops} d
  WHERE d.group_id = $1 AND d.{bucket} = r.bucket AND d.op_id > r.after AND d.op_id <= $4
  ORDER BY d.op_id
  LIMIT $5) b
ORDER BY r.ord
LIMIT $5`

// errReadOrder reports a read whose rows did not come in op id order
// within a bucket (see readBucketDataSQL); it would be a planner change.
var errReadOrder = errors.New("bucketstore: bucket data rows out of op id order (query plan changed?)")

// ReadShape selects the statement a bucket data read runs. Production
// uses the zero value; the other shape exists so that benchmarks can
// measure, through the real read path and sync endpoint, what the
// ordered, early-terminating read replaced.
type ReadShape int

const (
	// ReadLateral is the production read: requests as ordered rows, each
	// joined to an early-stopping index range scan of its bucket (see
	// readBucketDataSQL).
	ReadLateral ReadShape = iota
	// ReadORChain is the older shape (PowerSync's before its PR #721), one
	// OR arm per bucket:
	//
	//	WHERE (bucket_name = $3 AND op_id > $4) OR (…) ORDER BY bucket_name, op_id LIMIT n
	//
	// Benchmark baseline only. (In storage version 2 the arms name bucket
	// ids and the rows are joined to bucket_names, to sort by name as
	// before.) PostgreSQL cannot turn the arms into index
	// ranges in key order: it walks the primary key from the group's first
	// op and tests every row against the arms (or collects every requested
	// bucket's rows and sorts them), so a batch reads the rows of buckets
	// already drained again and costs more the further a drain has got.
	// Rows come in bucket_name order in the storage database's collation,
	// so the requests must be sorted that way (byte order under the C
	// collation); a read that finds them in another order fails instead of
	// returning a wrong page.
	ReadORChain
)

// orChainSQL builds the ReadORChain statement for n requests in layout
// l: $1 group, $2 checkpoint, then bucket (v2: its id) and after per
// request, and the limit last.
func orChainSQL(l *layout, n int) string {
	var b strings.Builder
	bucket := "bucket_name"
	if l.interned {
		bucket = "d.bucket"
		b.WriteString(`SELECT n.name, d.op_id, d.op, d.source_table, d.source_key, d.object_type, coalesce(d.object_id, d.object_uuid::text), d.checksum, d.data, d.target_op
FROM bucket_data2 d JOIN bucket_names n ON n.group_id = d.group_id AND n.id = d.bucket
WHERE d.group_id = $1 AND d.op_id <= $2 AND (`)
	} else {
		b.WriteString(`SELECT bucket_name, op_id, op, source_table, source_key, object_type, object_id, checksum, data, target_op
FROM bucket_data
WHERE group_id = $1 AND op_id <= $2 AND (`)
	}
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		fmt.Fprintf(&b, "(%s = $%d AND op_id > $%d)", bucket, 3+2*i, 4+2*i)
	}
	order := "bucket_name, op_id"
	if l.interned {
		order = "n.name, d.op_id"
	}
	fmt.Fprintf(&b, ")\nORDER BY %s\nLIMIT $%d", order, 3+2*n)
	return b.String()
}

// ReadBucketData streams the ops with after < op_id ≤ checkpoint of the
// requested buckets of group: bucket by bucket in request order, in op id
// order within a bucket, at most limit rows in total. fn is called once per
// row, synchronously, with a row that is reused for the next call (see
// OpRow for what may be kept); an error from fn stops the read and is
// returned.
//
// more reports whether rows beyond the ones delivered remain in the
// requested buckets (up to checkpoint). When it is true, every bucket before
// the last delivered row's bucket is complete, that bucket may have more,
// and later buckets were not read at all; the caller continues each bucket
// from the last op id it saw. When it is false, every requested bucket is
// complete up to checkpoint.
//
// It is one statement: per-bucket index range scans on bucket_data's
// primary key that stop early (see readBucketDataSQL). checkpoint must be a
// published checkpoint of group, so that every op at or below it is
// committed and the result is stable. Safe for concurrent use; it uses one
// pooled connection for the duration of the call, so a slow fn holds it.
func (s *Reader) ReadBucketData(ctx context.Context, group int, checkpoint int64, reqs []BucketRequest, limit int, fn func(*OpRow) error) (more bool, err error) {
	return s.ReadBucketDataShape(ctx, ReadLateral, group, checkpoint, reqs, limit, fn)
}

// ReadBucketDataShape is ReadBucketData with the statement chosen by
// shape. Only benchmarks pass anything but ReadLateral (see ReadORChain
// for the order its requests need).
func (s *Reader) ReadBucketDataShape(ctx context.Context, shape ReadShape, group int, checkpoint int64, reqs []BucketRequest, limit int, fn func(*OpRow) error) (more bool, err error) {
	if limit <= 0 {
		return false, errors.New("bucketstore: ReadBucketData limit must be positive")
	}
	if len(reqs) == 0 {
		return false, nil
	}
	lay, err := s.layout(ctx, group)
	if err != nil {
		return false, fmt.Errorf("read bucket data of group %d: %w", group, err)
	}
	var rows pgx.Rows
	var index map[string]int64 // ReadORChain: bucket name → request number
	switch shape {
	case ReadLateral:
		names := make([]string, len(reqs))
		afters := make([]int64, len(reqs))
		for i, r := range reqs {
			names[i], afters[i] = r.Bucket, r.After
		}
		buckets, aerr := s.bucketArg(ctx, lay, group, names)
		if aerr != nil {
			return false, fmt.Errorf("read bucket data of group %d: %w", group, aerr)
		}
		rows, err = s.pool.Query(ctx, lay.readBucketData, group, buckets, afters, checkpoint, limit+1)
	case ReadORChain:
		names := make([]string, len(reqs))
		for i, r := range reqs {
			names[i] = r.Bucket
		}
		buckets, aerr := s.bucketArg(ctx, lay, group, names)
		if aerr != nil {
			return false, fmt.Errorf("read bucket data of group %d: %w", group, aerr)
		}
		ids, _ := buckets.([]int64)
		args := make([]any, 0, 3+2*len(reqs))
		args = append(args, group, checkpoint)
		index = make(map[string]int64, len(reqs))
		for i, r := range reqs {
			if ids != nil {
				args = append(args, ids[i], r.After)
			} else {
				args = append(args, r.Bucket, r.After)
			}
			index[r.Bucket] = int64(i + 1)
		}
		args = append(args, limit+1)
		rows, err = s.pool.Query(ctx, orChainSQL(lay, len(reqs)), args...)
	default:
		return false, fmt.Errorf("bucketstore: unknown read shape %d", shape)
	}
	if err != nil {
		return false, fmt.Errorf("read bucket data of group %d: %w", group, err)
	}
	defer rows.Close()

	var (
		row                        OpRow
		ord, prevOrd, prevOp       int64
		op                         int16
		sourceTable, typ, id, data pgtype.DriverBytes
		sourceKey                  pgtype.UUID
		sourceNum                  pgtype.Int4 // v2's source_table
		lastNum                    int32       // and the last one's id
		last                       tableRef
		sum                        int64
		target                     pgtype.Int8
		n                          int
		buf                        []byte
		names                      = map[string]string{} // interned object types and table ids
		bucketName                 pgtype.DriverBytes    // ReadORChain's first column
	)
	// One destination list for all rows: a variadic Scan call would
	// allocate it per row.
	dest := []any{&ord, &row.OpID, &op, &sourceTable, &sourceKey, &typ, &id, &sum, &data, &target}
	if index != nil {
		dest[0] = &bucketName
	}
	if lay.interned {
		dest[3] = &sourceNum
	}
	intern := func(b []byte) string {
		if s, ok := names[string(b)]; ok {
			return s
		}
		s := string(b)
		names[s] = s
		return s
	}
	for rows.Next() {
		if n == limit {
			// The limit+1st row: only tells that more remain.
			return true, nil
		}
		n++
		if err := rows.Scan(dest...); err != nil {
			return false, fmt.Errorf("read bucket data of group %d: %w", group, err)
		}
		if index != nil {
			ord = index[string(bucketName)] // 0 (out of range) if unrequested
		}
		if ord < 1 || int(ord) > len(reqs) {
			return false, fmt.Errorf("read bucket data: request number %d out of range", ord)
		}
		if ord < prevOrd || (ord == prevOrd && row.OpID <= prevOp) {
			return false, errReadOrder
		}
		prevOrd, prevOp = ord, row.OpID
		row.Bucket = reqs[ord-1].Bucket
		row.Op = op
		row.ObjectType = intern(typ)
		// One allocation per row holds both the object id and the subkey.
		buf = append(buf[:0], id...)
		switch {
		case !sourceKey.Valid:
		case sourceNum.Valid:
			if sourceNum.Int32 != lastNum || last.id == "" {
				// Rows mostly come from one table after another: the
				// last one saves the shared cache's lock per row.
				if last, err = s.tables.table(ctx, s.pool, group, sourceNum.Int32); err != nil {
					return false, fmt.Errorf("read bucket data of group %d: %w", group, err)
				}
				lastNum = sourceNum.Int32
			}
			buf = checksum.AppendSubkey(buf, last.id, uuid.UUID(sourceKey.Bytes))
			if typ == nil {
				row.ObjectType = last.name // v2 leaves out a type that is the table's name
			}
		case sourceTable != nil:
			buf = checksum.AppendSubkey(buf, intern(sourceTable), uuid.UUID(sourceKey.Bytes))
		}
		both := string(buf)
		row.ObjectID, row.Subkey = both[:len(id)], both[len(id):]
		row.Data = nil
		if data != nil {
			row.Data = data
		}
		row.Checksum = checksum.FromInt64(sum)
		row.TargetOp = 0
		if target.Valid {
			row.TargetOp = target.Int64
		}
		if err := fn(&row); err != nil {
			return false, err
		}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read bucket data of group %d: %w", group, err)
	}
	return false, nil
}

// Validity is what tells whether ops and checksums read from a group's
// storage, in statements that ended before it was read, were complete at
// the checkpoint they were read at (ReadValidity).
type Validity struct {
	// CompactFloor is the checkpoint op id up to which compaction may
	// have rewritten the group's ops (0: never compacted). It is set
	// before any op is rewritten: a client that read ops of a checkpoint
	// below it may have read a rewrite (see compact.go's doc comment).
	CompactFloor int64
	// Serving: the group was ACTIVE or PROCESSING (Group.Serving). A
	// group that stopped — taken over — is cleared once the stop has
	// committed and never before, so reads that ended before a read that
	// still sees it serving saw none of the clearing; otherwise they may
	// have read part of its storage only.
	Serving bool
}

// ReadValidity reads the group's Validity in one statement. It is the
// Reader's, not the Compactor's: the sync API reads it after a
// checkpoint's data reads, to tell a complete download from one that
// compaction rewrote or a takeover's clearing emptied under it.
func (s *Reader) ReadValidity(ctx context.Context, group int) (Validity, error) {
	var v Validity
	var state State
	if err := s.pool.QueryRow(ctx, `SELECT compact_floor, state FROM groups WHERE id = $1`, group).Scan(&v.CompactFloor, &state); err != nil {
		return Validity{}, fmt.Errorf("read the validity of group %d's reads: %w", group, err)
	}
	v.Serving = Group{State: state}.Serving()
	return v, nil
}

// Stopped returns an error wrapping ErrGroupStopped for group, whose
// Validity v is, unless it still serves: what a shared load (a checksum
// fetch, an op segment) read before v must then be neither cached nor
// returned, as the group's clearing may have begun.
func (v Validity) Stopped(group int) error {
	if v.Serving {
		return nil
	}
	return fmt.Errorf("group %d: %w", group, ErrGroupStopped)
}

// stillServing is ReadValidity's Stopped: a checksum fetch calls it after
// its query.
func (s *Reader) stillServing(ctx context.Context, group int) error {
	v, err := s.ReadValidity(ctx, group)
	if err != nil {
		return err
	}
	return v.Stopped(group)
}
