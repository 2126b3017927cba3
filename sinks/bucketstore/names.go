package bucketstore

import (
	"context"
	"fmt"
	"slices"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// dbQuerier is what the name and table lookups run on: a pool, a
// connection or a transaction.
type dbQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// nameCacheSize bounds each direction of the bucket name cache: about
// 150 bytes an entry, so 30 MB at most each way. A bucket's id never
// changes in its group, so an entry is never stale; a miss costs one
// indexed read of bucket_names.
const nameCacheSize = 200_000

// noBucket is the id a reader asks for a name that has none: no op
// carries it (ids come from bucket_id_seq, which starts at 1), so the
// bucket reads empty, with checksum 0.
const noBucket int64 = -1

// nameKey is a bucket name of a group; idKey a bucket id of a group.
type nameKey struct {
	group int
	name  string
}

type idKey struct {
	group int
	id    int64
}

// bucketNames caches the bucket ids of v2 groups (bucket_names) both
// ways, for every writer and reader of the store. Only names that have an
// id are cached: a reader's miss may be interned by a writer later.
type bucketNames struct {
	ids   *lru.Cache[nameKey, int64]
	names *lru.Cache[idKey, string]
}

func newBucketNames() *bucketNames {
	ids, _ := lru.New[nameKey, int64](nameCacheSize) // errors only for a size ≤ 0
	names, _ := lru.New[idKey, string](nameCacheSize)
	return &bucketNames{ids: ids, names: names}
}

func (c *bucketNames) add(group int, name string, id int64) {
	c.ids.Add(nameKey{group, name}, id)
	c.names.Add(idKey{group, id}, name)
}

// lookupBucketsSQL reads the ids of names ($2) of group $1.
const lookupBucketsSQL = `SELECT name, id FROM bucket_names WHERE group_id = $1 AND name = ANY($2::text[])`

// internBucketsSQL gives each of the names ($2) of group $1 that has no
// id one, inserting in name order: two writers interning overlapping
// names take the names' index entries in the same order, so one waits for
// the other instead of both deadlocking.
const internBucketsSQL = `INSERT INTO bucket_names (group_id, id, name)
SELECT $1, nextval('bucket_id_seq'), n FROM (SELECT DISTINCT n FROM unnest($2::text[]) AS u(n)) s ORDER BY n
ON CONFLICT (group_id, name) DO NOTHING`

// bucketIDs returns the ids of names in group (a map from each name
// that has one). With intern, names without one get one first, in a
// statement of its own on q, which must not be in a transaction: an id
// outlives a write that fails (an orphan name is harmless: no op carries
// it), and the write's transaction holds no lock on bucket_names for its
// length. Without intern it only reads: a reader never interns.
func (d *db) bucketIDs(ctx context.Context, q dbQuerier, group int, names []string, intern bool) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	var miss []string
	seen := map[string]struct{}{}
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		if id, ok := d.names.ids.Get(nameKey{group, n}); ok {
			out[n] = id
			continue
		}
		if _, ok := seen[n]; !ok {
			seen[n] = struct{}{}
			miss = append(miss, n)
		}
	}
	if len(miss) == 0 {
		return out, nil
	}
	if intern {
		slices.Sort(miss)
		if _, err := q.Exec(ctx, internBucketsSQL, group, miss); err != nil {
			return nil, fmt.Errorf("intern %d bucket names of group %d: %w", len(miss), group, err)
		}
	}
	rows, err := q.Query(ctx, lookupBucketsSQL, group, miss)
	if err != nil {
		return nil, fmt.Errorf("read the ids of %d bucket names of group %d: %w", len(miss), group, err)
	}
	var name string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&name, &id}, func() error {
		out[name] = id
		d.names.add(group, name, id)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the ids of %d bucket names of group %d: %w", len(miss), group, err)
	}
	if intern {
		for _, n := range miss {
			if _, ok := out[n]; !ok {
				return nil, fmt.Errorf("intern bucket name %q of group %d: no id after interning", n, group)
			}
		}
	}
	return out, nil
}

// bucketNamesOf returns the names of the bucket ids of group.
func (d *db) bucketNamesOf(ctx context.Context, q dbQuerier, group int, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	var miss []int64
	seen := map[int64]struct{}{}
	for _, id := range ids {
		if _, ok := out[id]; ok {
			continue
		}
		if n, ok := d.names.names.Get(idKey{group, id}); ok {
			out[id] = n
			continue
		}
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			miss = append(miss, id)
		}
	}
	if len(miss) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT name, id FROM bucket_names WHERE group_id = $1 AND id = ANY($2::int8[])`, group, miss)
	if err != nil {
		return nil, fmt.Errorf("read the names of %d bucket ids of group %d: %w", len(miss), group, err)
	}
	var name string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&name, &id}, func() error {
		out[id] = name
		d.names.add(group, name, id)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the names of %d bucket ids of group %d: %w", len(miss), group, err)
	}
	for _, id := range miss {
		if _, ok := out[id]; !ok {
			return nil, fmt.Errorf("group %d has no bucket id %d", group, id)
		}
	}
	return out, nil
}

// bucketArg is a read's bucket column argument for names: the names (v1)
// or their ids (v2), noBucket for a name without one.
func (d *db) bucketArg(ctx context.Context, l *layout, group int, names []string) (any, error) {
	if !l.interned {
		return names, nil
	}
	ids, err := d.bucketIDs(ctx, d.pool, group, names, false)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(names))
	for i, n := range names {
		if id, ok := ids[n]; ok {
			out[i] = id
		} else {
			out[i] = noBucket
		}
	}
	return out, nil
}
