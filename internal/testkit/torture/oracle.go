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

// Dup is one row version stored more than once in a bucket.
type Dup struct {
	Bucket, Key string
	Ops         []int64 // the op ids: the earlier, then the repeat
	Remove      bool    // a REMOVE not preceded by a PUT of the row
}

func (d Dup) String() string {
	if d.Remove {
		if d.Ops[0] == 0 {
			return fmt.Sprintf("bucket %s row %s: REMOVE op %d of a row never PUT in the bucket", d.Bucket, d.Key, d.Ops[1])
		}
		return fmt.Sprintf("bucket %s row %s: REMOVE op %d repeats REMOVE op %d", d.Bucket, d.Key, d.Ops[1], d.Ops[0])
	}
	return fmt.Sprintf("bucket %s row %s: the same data PUT twice, ops %d and %d", d.Bucket, d.Key, d.Ops[0], d.Ops[1])
}

// Replay is what storage holds for a group, rebuilt op by op in op id
// order as checkpoints pass. Ops at or below a published checkpoint are
// final (no write commits below it afterwards), so each Advance reads only
// the ops since the previous one. While replaying it checks every PUT's
// checksum against its data and finds row versions stored twice: a
// (bucket, row, data) PUT again — every version of a source row has a new
// rev, so its data is unique — or a REMOVE of a row that is not there.
type Replay struct {
	Group      int
	Checkpoint int64
	Last       map[string]map[string]LastOp // bucket → "type/id" → newest op
	Sums       map[string]uint32            // bucket → sum of its ops' checksums mod 2^32

	seen map[[sha256.Size]byte]int64 // hash of (bucket, row, data) → op id of its PUT
}

// NewReplay starts an empty replay of group.
func NewReplay(group int) *Replay {
	return &Replay{Group: group, Last: map[string]map[string]LastOp{}, Sums: map[string]uint32{},
		seen: map[[sha256.Size]byte]int64{}}
}

// Advance replays the ops in (r.Checkpoint, checkpoint] and returns the
// number replayed, PUT checksum mismatches and duplicates among them.
// Storage must hold only PUT and REMOVE ops (the harness turns background
// compaction off): a MOVE or CLEAR is an error, since the oracle does not
// model them.
func (r *Replay) Advance(ctx context.Context, pool *pgxpool.Pool, checkpoint int64) (n int64, bad []string, dups []Dup, err error) {
	if checkpoint <= r.Checkpoint {
		return 0, nil, nil, nil
	}
	rows, err := pool.Query(ctx, `SELECT bucket_name, object_type, object_id, op_id, op, coalesce(data, ''), checksum
		FROM syncpipe.bucket_ops WHERE group_id = $1 AND op_id > $2 AND op_id <= $3 ORDER BY op_id`, r.Group, r.Checkpoint, checkpoint)
	if err != nil {
		return 0, nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var b, typ, id string
		var op LastOp
		var sum int64
		if err := rows.Scan(&b, &typ, &id, &op.OpID, &op.Op, &op.Data, &sum); err != nil {
			return n, bad, dups, err
		}
		op.Checksum = uint32(sum)
		n++
		key := typ + "/" + id
		prev, had := r.Last[b][key]
		switch op.Op {
		case 1:
			if want := PutChecksum(typ, id, op.Data); op.Checksum != want {
				bad = append(bad, fmt.Sprintf("bucket %s op %d (PUT %s): stored checksum %d, its data hashes to %d", b, op.OpID, key, op.Checksum, want))
			}
			h := sha256.Sum256([]byte(b + "\x00" + key + "\x00" + op.Data))
			if first, ok := r.seen[h]; ok {
				dups = append(dups, Dup{Bucket: b, Key: key, Ops: []int64{first, op.OpID}})
			} else {
				r.seen[h] = op.OpID
			}
		case 2:
			if !had || prev.Op == 2 {
				dups = append(dups, Dup{Bucket: b, Key: key, Ops: []int64{prev.OpID, op.OpID}, Remove: true})
			}
			op.Data = ""
		default:
			return n, bad, dups, fmt.Errorf("bucket %s op %d: op kind %d (MOVE/CLEAR), which this oracle does not model", b, op.OpID, op.Op)
		}
		if r.Last[b] == nil {
			r.Last[b] = map[string]LastOp{}
		}
		r.Last[b][key] = op
		r.Sums[b] += op.Checksum
	}
	if err := rows.Err(); err != nil {
		return n, bad, dups, err
	}
	r.Checkpoint = checkpoint
	return n, bad, dups, nil
}

// Rows returns the rows whose newest op is a PUT, per bucket.
func (r *Replay) Rows() Buckets {
	out := Buckets{}
	for b, rows := range r.Last {
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

// DescribeOp names a stored row's newest op, for mismatch reports.
func (r *Replay) DescribeOp(bucket, key string) string {
	op, ok := r.Last[bucket][key]
	if !ok {
		return "no op stored"
	}
	kind := map[int16]string{1: "PUT", 2: "REMOVE"}[op.Op]
	return fmt.Sprintf("newest op %d %s", op.OpID, kind)
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

// JSONCache remembers pairs of JSON texts found equal as values, so that
// rows unchanged since an earlier comparison are not decoded again.
type JSONCache map[[sha256.Size]byte]struct{}

// Same compares two JSON texts as values, through the cache.
func (c JSONCache) Same(a, b string) bool {
	if a == b {
		return true
	}
	k := sha256.Sum256([]byte(a + "\x00" + b))
	if _, ok := c[k]; ok {
		return true
	}
	if !sameJSON(a, b) {
		return false
	}
	c[k] = struct{}{}
	return true
}

// Mismatches lists, in a stable order, how got differs from want: rows
// missing (lost), rows that should be gone (stale), rows with other data.
// opOf, if set, names the op that left a row as it is. limit caps the list;
// the counts are complete.
func Mismatches(what string, got, want Buckets, opOf func(bucket, key string) string, same JSONCache, limit int) (lost, stale, wrong int, lines []string) {
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
			case !same.Same(gd, wd):
				wrong++
				add(fmt.Sprintf("%s: bucket %s: row %s (%s):\n   got %.300s\n  want %.300s", what, b, k, op(b, k), gd, wd))
			}
		}
	}
	return lost, stale, wrong, lines
}
