package torture

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PutChecksum is the PowerSync checksum of a PUT op, computed here from
// its definition (the first four bytes, little-endian, of SHA-256 of
// "put.<type>.<id>.<data>"), not with the product's checksum package.
func PutChecksum(objectType, objectID, data string) uint32 {
	h := sha256.Sum256([]byte("put." + objectType + "." + objectID + "." + data))
	return binary.LittleEndian.Uint32(h[:4])
}

// Buckets is bucket → "type/id" → row JSON.
type Buckets map[string]map[string]string

// BucketName is the stored name of a bucket of group: "<group>#<def>[params]".
func BucketName(group int, def string, params ...string) string {
	b, _ := json.Marshal(params)
	if len(params) == 0 {
		b = []byte("[]")
	}
	return fmt.Sprintf("%d#%s%s", group, def, b)
}

// Expected computes, with plain SQL on the source, what Rules put in each
// bucket of group: every items and docs row with an owner in that owner's
// bucket, every tag in the global one. The rows are to_jsonb of the whole
// row (SELECT *); only int, bigint and text columns exist, which JSON
// renders the same way the sync protocol does.
func Expected(ctx context.Context, src *pgx.Conn, group int) (Buckets, int, error) {
	out := Buckets{}
	n := 0
	add := func(bucket, key, data string) {
		if out[bucket] == nil {
			out[bucket] = map[string]string{}
		}
		out[bucket][key] = data
		n++
	}
	rows, err := src.Query(ctx, `SELECT 'items', id::text, owner, to_jsonb(t)::text FROM items t WHERE owner IS NOT NULL
		UNION ALL SELECT 'docs', id::text, owner, to_jsonb(t)::text FROM docs t WHERE owner IS NOT NULL
		UNION ALL SELECT 'tags', id::text, NULL, to_jsonb(t)::text FROM tags t`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var typ, id, data string
		var owner *string
		if err := rows.Scan(&typ, &id, &owner, &data); err != nil {
			return nil, 0, err
		}
		if owner != nil {
			add(BucketName(group, "by_owner", *owner), typ+"/"+id, data)
		} else {
			add(BucketName(group, "global"), typ+"/"+id, data)
		}
	}
	return out, n, rows.Err()
}

// LastOp is the newest op of a row in a bucket.
type LastOp struct {
	OpID     int64
	Op       int16 // 1 PUT, 2 REMOVE
	Data     string
	Checksum uint32
}

// Stored is what storage holds for a group at a checkpoint.
type Stored struct {
	Checkpoint int64
	Last       map[string]map[string]LastOp // bucket → "type/id" → newest op
	Sums       map[string]uint32            // bucket → sum of its ops' checksums mod 2^32
	Ops        int64                        // ops at or below the checkpoint
}

// Rows returns the rows whose newest op is a PUT, per bucket.
func (s *Stored) Rows() Buckets {
	out := Buckets{}
	for b, rows := range s.Last {
		for k, op := range rows {
			if op.Op == 1 {
				if out[b] == nil {
					out[b] = map[string]string{}
				}
				out[b][k] = op.Data
			}
		}
	}
	return out
}

// ReadStored reads the newest op of every (bucket, row) of group at or
// below checkpoint, and every bucket's checksum. Storage must hold only
// PUT and REMOVE ops (syncpipe does not compact yet): a MOVE or CLEAR is
// reported as an error, since the oracle does not model them.
func ReadStored(ctx context.Context, pool *pgxpool.Pool, group int, checkpoint int64) (*Stored, error) {
	st := &Stored{Checkpoint: checkpoint, Last: map[string]map[string]LastOp{}, Sums: map[string]uint32{}}
	var other int64
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE op NOT IN (1, 2)) FROM syncpipe.bucket_data
		WHERE group_id = $1 AND op_id <= $2`, group, checkpoint).Scan(&st.Ops, &other); err != nil {
		return nil, err
	}
	if other > 0 {
		return nil, fmt.Errorf("group %d holds %d MOVE/CLEAR ops, which this oracle does not model", group, other)
	}
	rows, err := pool.Query(ctx, `SELECT bucket_name, sum(checksum) FROM syncpipe.bucket_data
		WHERE group_id = $1 AND op_id <= $2 GROUP BY bucket_name`, group, checkpoint)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var b string
		var sum int64
		if err := rows.Scan(&b, &sum); err != nil {
			rows.Close()
			return nil, err
		}
		st.Sums[b] = uint32(uint64(sum))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT DISTINCT ON (bucket_name, object_type, object_id)
			bucket_name, object_type, object_id, op_id, op, coalesce(data, ''), checksum
		FROM syncpipe.bucket_data WHERE group_id = $1 AND op_id <= $2
		ORDER BY bucket_name, object_type, object_id, op_id DESC`, group, checkpoint)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var b, typ, id string
		var op LastOp
		var sum int64
		if err := rows.Scan(&b, &typ, &id, &op.OpID, &op.Op, &op.Data, &sum); err != nil {
			return nil, err
		}
		op.Checksum = uint32(sum)
		if st.Last[b] == nil {
			st.Last[b] = map[string]LastOp{}
		}
		st.Last[b][typ+"/"+id] = op
	}
	return st, rows.Err()
}

// CheckPutChecksums verifies that every PUT of group with an op id in
// (from, to] has the checksum of its data, returning the number checked.
func CheckPutChecksums(ctx context.Context, pool *pgxpool.Pool, group int, from, to int64) (int64, []string, error) {
	rows, err := pool.Query(ctx, `SELECT bucket_name, op_id, object_type, object_id, coalesce(data, ''), checksum
		FROM syncpipe.bucket_data WHERE group_id = $1 AND op = 1 AND op_id > $2 AND op_id <= $3`, group, from, to)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var n int64
	var bad []string
	for rows.Next() {
		var b, typ, id, data string
		var op, sum int64
		if err := rows.Scan(&b, &op, &typ, &id, &data, &sum); err != nil {
			return n, bad, err
		}
		n++
		if want := PutChecksum(typ, id, data); uint32(sum) != want {
			bad = append(bad, fmt.Sprintf("bucket %s op %d (PUT %s/%s): stored checksum %d, its data hashes to %d", b, op, typ, id, uint32(sum), want))
		}
	}
	return n, bad, rows.Err()
}

// Dup is one row version stored more than once in a bucket.
type Dup struct {
	Bucket, Key string
	Ops         []int64 // op ids, ascending
	Remove      bool    // a REMOVE not preceded by a PUT (Ops: the REMOVE, then the earlier REMOVE if any)
}

func (d Dup) String() string {
	if d.Remove {
		if len(d.Ops) == 1 {
			return fmt.Sprintf("bucket %s row %s: REMOVE op %d of a row never PUT in the bucket", d.Bucket, d.Key, d.Ops[0])
		}
		return fmt.Sprintf("bucket %s row %s: REMOVE op %d repeats REMOVE op %d", d.Bucket, d.Key, d.Ops[0], d.Ops[1])
	}
	return fmt.Sprintf("bucket %s row %s: the same data PUT %d times, ops %v", d.Bucket, d.Key, len(d.Ops), d.Ops)
}

// Duplicates finds row versions stored more than once: a (bucket, row,
// data) with several PUTs (every version of a source row has a new rev,
// so its data is unique), and REMOVEs of a row not preceded by a PUT of
// it since its last REMOVE. Only those whose newest op is above after
// (older ones were reported before), at most limit of each.
func Duplicates(ctx context.Context, pool *pgxpool.Pool, group int, after int64, limit int) ([]Dup, error) {
	var out []Dup
	rows, err := pool.Query(ctx, `SELECT bucket_name, object_type || '/' || object_id, array_agg(op_id ORDER BY op_id)
		FROM syncpipe.bucket_data WHERE group_id = $1 AND op = 1
		GROUP BY bucket_name, object_type, object_id, md5(data) HAVING count(*) > 1 AND max(op_id) > $2 ORDER BY 1, 2 LIMIT $3`, group, after, limit)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var d Dup
		if err := rows.Scan(&d.Bucket, &d.Key, &d.Ops); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT bucket_name, object_type || '/' || object_id, op_id, prev_op FROM (
			SELECT bucket_name, object_type, object_id, op_id, op,
				lag(op) OVER w AS prev, lag(op_id) OVER w AS prev_op
			FROM syncpipe.bucket_data WHERE group_id = $1
			WINDOW w AS (PARTITION BY bucket_name, object_type, object_id ORDER BY op_id)) o
		WHERE op = 2 AND (prev IS NULL OR prev = 2) AND op_id > $2 ORDER BY 1, 2 LIMIT $3`, group, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		d := Dup{Remove: true}
		var op int64
		var prev *int64
		if err := rows.Scan(&d.Bucket, &d.Key, &op, &prev); err != nil {
			return nil, err
		}
		d.Ops = []int64{op}
		if prev != nil {
			d.Ops = append(d.Ops, *prev)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// sameJSON compares two JSON texts as values (numbers by their text).
func sameJSON(a, b string) bool {
	if a == b {
		return true
	}
	var x, y any
	da := json.NewDecoder(strings.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(strings.NewReader(b))
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Mismatches lists, in a stable order, how got differs from want: rows
// missing (lost), rows that should be gone (stale), rows with other data.
// opOf, if set, names the op that left a row as it is. limit caps the list;
// the counts are complete.
func Mismatches(what string, got, want Buckets, opOf func(bucket, key string) string, limit int) (lost, stale, wrong int, lines []string) {
	add := func(s string) {
		if len(lines) < limit {
			lines = append(lines, s)
		}
	}
	op := func(b, k string) string {
		if opOf == nil {
			return ""
		}
		return opOf(b, k)
	}
	names := map[string]bool{}
	for b := range got {
		names[b] = true
	}
	for b := range want {
		names[b] = true
	}
	sorted := make([]string, 0, len(names))
	for b := range names {
		sorted = append(sorted, b)
	}
	sort.Strings(sorted)
	for _, b := range sorted {
		g, w := got[b], want[b]
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			gd, inG := g[k]
			wd, inW := w[k]
			switch {
			case inW && !inG:
				lost++
				add(fmt.Sprintf("%s: bucket %s: row %s missing (%s), want %.120s", what, b, k, op(b, k), wd))
			case inG && !inW:
				stale++
				add(fmt.Sprintf("%s: bucket %s: row %s should not be there (%s): %.120s", what, b, k, op(b, k), gd))
			case !sameJSON(gd, wd):
				wrong++
				add(fmt.Sprintf("%s: bucket %s: row %s (%s):\n   got %.300s\n  want %.300s", what, b, k, op(b, k), gd, wd))
			}
		}
	}
	return lost, stale, wrong, lines
}

// DescribeOp names a stored row's newest op, for mismatch reports.
func (s *Stored) DescribeOp(bucket, key string) string {
	op, ok := s.Last[bucket][key]
	if !ok {
		return "no op stored"
	}
	kind := map[int16]string{1: "PUT", 2: "REMOVE"}[op.Op]
	return fmt.Sprintf("newest op %d %s", op.OpID, kind)
}
