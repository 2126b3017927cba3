package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Storage versions (groups.storage_version; see doc.go, "Storage
// versions").
const (
	// storageV1 is the first layout: bucket_data and current_data shared
	// by every group, keyed by bucket name and table id text.
	storageV1 = 1
	// storageV2: a partition per group of bucket_data2 and
	// current_data2, buckets and tables named by interned integers.
	storageV2 = 2
	// storageV3 is the layout of every group created now: v2 with its
	// current rows in current_data3, keyed by (source_table, key_order,
	// source_key), so that a snapshot appends to its primary key instead
	// of writing to random leaves of it (key_order: model.Change.KeyOrder).
	storageV3 = 3
)

// layout is everything that differs between storage versions: the SQL of
// every statement that reads or writes a group's ops and current rows, and
// how the write path encodes the bucket and table columns. The logic that
// runs these statements is one for both versions; a group's layout is
// chosen from its storage_version (db.layout).
type layout struct {
	version int
	// interned: bucket and source_table columns hold the ids of
	// bucket_names and source_tables.num (v2), not the names (v1).
	interned bool
	// ordered: current rows carry key_order and are found by it (v3).
	ordered bool
	// compactMembers: current rows' memberships are packed in version
	// 3's form, 3 bytes shorter for most rows (see appendMembers).
	compactMembers bool
	// ops and cur are the tables (v2: the partitioned parents).
	ops, cur string

	copyCurrent, copyStage, copyOps string
	// createStage makes the session's staging table for a resumed
	// snapshot chunk; insertStaged moves its new rows over, returning
	// each one's table (as text) and key.
	createStage, insertStaged string
	// loadPrevious reads the stored state of a batch's rows (see
	// currentProbe); rowData their row data.
	loadPrevious, rowData         string
	deleteCurrent, truncateKeys   string
	readBucketData, checksumRange string
	// Compaction's statements (compact.go).
	compactReadDesc, compactMove, compactReadLeading, compactDeleteMerged, compactWriteClear string
}

// layouts holds one value per storage version.
var layouts = map[int]*layout{
	storageV1: newLayout(storageV1),
	storageV2: newLayout(storageV2),
	storageV3: newLayout(storageV3),
}

// newLayout fills the statements' templates for version: {ops} and {cur}
// are the tables (stage_{cur} the session's staging table for {cur}),
// {bucket} the bucket column and {btype} its type, {ttype} the
// source_table column's type; {objcols} are the object id's
// columns as written, {objid} and {d.objid} (of alias d) read it as
// text, {objnull} sets it to NULL (v2 keeps a canonical UUID id in
// object_uuid and any other in object_id). {curcols} are current rows'
// columns as written; {probe} unnests a probe's arguments (see
// layout.probeArgs) as k and {probed} matches a current row to k;
// {order} is the key order column as read (v1, v2: 0) and {after} the
// truncateKeys condition and order.
func newLayout(version int) *layout {
	l := &layout{version: version}
	var r *strings.Replacer
	unordered := []string{"{curcols}", "group_id, source_table, source_key, buckets, lookups, data",
		"{probed}", "source_table = k.t AND source_key = k.key", "{order}", "0::int4",
		"{after}", "source_key > $3 ORDER BY source_key"}
	switch version {
	case storageV1:
		l.ops, l.cur = "bucket_data", "current_data"
		r = strings.NewReplacer(append(unordered, "{ops}", l.ops, "{cur}", l.cur, "{bucket}", "bucket_name", "{btype}", "text", "{ttype}", "text",
			"{objcols}", "object_id", "{objid}", "object_id", "{d.objid}", "d.object_id",
			"{objnull}", "object_id = NULL", "{probe}", "unnest($2::text[], $3::uuid[]) WITH ORDINALITY AS k (t, key, i)")...)
	case storageV2, storageV3:
		l.interned = true
		l.ops, l.cur = "bucket_data2", "current_data2"
		if version == storageV3 {
			l.cur = "current_data3"
		}
		v2 := []string{"{ops}", l.ops, "{cur}", l.cur, "{bucket}", "bucket", "{btype}", "int8", "{ttype}", "int4",
			"{objcols}", "object_uuid, object_id",
			"{objid}", "coalesce(object_id, object_uuid::text)", "{d.objid}", "coalesce(d.object_id, d.object_uuid::text) AS object_id",
			"{objnull}", "object_id = NULL, object_uuid = NULL"}
		if version == storageV2 {
			r = strings.NewReplacer(append(v2, append(unordered,
				"{probe}", "unnest($2::int4[], $3::uuid[]) WITH ORDINALITY AS k (t, key, i)")...)...)
			break
		}
		l.ordered, l.compactMembers = true, true
		r = strings.NewReplacer(append(v2,
			"{curcols}", "group_id, source_table, source_key, buckets, lookups, data, key_order",
			"{probe}", "unnest($2::int4[], $3::uuid[], $4::int4[]) WITH ORDINALITY AS k (t, key, o, i)",
			"{probed}", "source_table = k.t AND key_order = k.o AND source_key = k.key", "{order}", "key_order",
			"{after}", "(key_order, source_key) > ($5, $3) ORDER BY key_order, source_key")...)
	default:
		panic(fmt.Sprintf("bucketstore: no storage layout %d", version))
	}
	l.copyCurrent = r.Replace(copyCurrentSQL)
	l.copyStage = r.Replace(copyStageSQL)
	l.copyOps = r.Replace(copyOpsSQL)
	l.createStage = r.Replace(createStageSQL)
	l.insertStaged = r.Replace(insertStagedSQL)
	l.loadPrevious = r.Replace(loadPreviousSQL)
	l.rowData = r.Replace(rowDataSQL)
	l.deleteCurrent = r.Replace(deleteCurrentSQL)
	l.truncateKeys = r.Replace(truncateKeysSQL)
	l.readBucketData = r.Replace(readBucketDataSQL)
	l.checksumRange = r.Replace(checksumRangeSQL)
	l.compactReadDesc = r.Replace(compactReadDescSQL)
	l.compactMove = r.Replace(moveSQL)
	l.compactReadLeading = r.Replace(readLeadingSQL)
	l.compactDeleteMerged = r.Replace(deleteMergedSQL)
	l.compactWriteClear = r.Replace(writeClearSQL)
	return l
}

// checksumArg is sum as a statement argument for the checksum column:
// v1's is an int8 holding the unsigned value, v2's an int4 holding its
// bits (4 bytes less per op; readers take the low 32 bits either way,
// checksum.FromInt64).
func (l *layout) checksumArg(sum uint32) any {
	if l.interned {
		return int32(sum)
	}
	return int64(sum)
}

// probeArgs are the arguments of a current row probe (currentProbe) of
// group for the rows at tables (see db.tableArg), keys and, v3, orders.
func (l *layout) probeArgs(group int, tables any, keys []pgtype.UUID, orders []int32) []any {
	if l.ordered {
		return []any{group, tables, keys, orders}
	}
	return []any{group, tables, keys}
}

// truncateArgs are truncateKeys' arguments: up to limit rows of group's
// table (tables, of one) after the row (afterOrder, after).
func (l *layout) truncateArgs(group int, tables any, after uuid.UUID, afterOrder int32, limit int) []any {
	if l.ordered {
		return []any{group, tables, after, limit, afterOrder}
	}
	return []any{group, tables, after, limit}
}

// partitions are the names of a v2 or v3 group's partitions of its
// layout's ops and current rows parents (l.ops, l.cur): the parent's name
// and _g<group>, which groupbytes.go reads the group from.
func (l *layout) partitions(group int) (ops, cur string) {
	g := "_g" + strconv.Itoa(group)
	return l.ops + g, l.cur + g
}

// createPartitionsSQL creates a v2 or v3 group's partitions, each with
// its primary key without group_id (one value per partition: 4 bytes and
// an alignment pad less in every index entry); v3's current rows are
// keyed by key_order before the replica id. Each is created on its own and
// then attached: ATTACH PARTITION takes a lock on the parent that lets
// every other group's reads and writes go on, where CREATE TABLE …
// PARTITION OF would wait for them and stop them until it commits.
func createPartitionsSQL(group, version int) string {
	l := layouts[version]
	ops, cur := l.partitions(group)
	curKey := "source_table, source_key"
	if l.ordered {
		curKey = "source_table, key_order, source_key"
	}
	return fmt.Sprintf(`CREATE TABLE %[1]s (LIKE %[5]s INCLUDING ALL, PRIMARY KEY (bucket, op_id));
ALTER TABLE %[5]s ATTACH PARTITION %[1]s FOR VALUES IN (%[3]d);
CREATE TABLE %[2]s (LIKE %[6]s INCLUDING ALL, PRIMARY KEY (%[4]s));
ALTER TABLE %[6]s ATTACH PARTITION %[2]s FOR VALUES IN (%[3]d)`,
		pgx.Identifier{ops}.Sanitize(), pgx.Identifier{cur}.Sanitize(), group, curKey, l.ops, l.cur)
}

// layoutCache remembers each group's layout: a group's storage version
// never changes.
type layoutCache struct {
	mu      sync.Mutex
	byGroup map[int]*layout
}

// layout returns group's layout, reading its storage version once.
func (d *db) layout(ctx context.Context, group int) (*layout, error) {
	d.layouts.mu.Lock()
	l, ok := d.layouts.byGroup[group]
	d.layouts.mu.Unlock()
	if ok {
		return l, nil
	}
	var v int
	err := d.pool.QueryRow(ctx, `SELECT storage_version FROM groups WHERE id = $1`, group).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("group %d: %w", group, ErrNoGroup)
	}
	if err != nil {
		return nil, fmt.Errorf("read the storage version of group %d: %w", group, err)
	}
	l, ok = layouts[v]
	if !ok {
		return nil, fmt.Errorf("group %d has storage version %d, which this syncpipe does not know: upgrade syncpipe", group, v)
	}
	d.layouts.mu.Lock()
	if d.layouts.byGroup == nil {
		d.layouts.byGroup = map[int]*layout{}
	}
	d.layouts.byGroup[group] = l
	d.layouts.mu.Unlock()
	return l, nil
}

// tableNums maps a group's table ids to their numbers (source_tables.num)
// and back, for v2 groups, whose ops and current rows carry the number.
// Neither ever changes for a table's life in the group; a table
// registered since the last load is a miss, which loads the group's
// tables again.
type tableNums struct {
	mu      sync.Mutex
	byGroup map[int]*tableMap
}

type tableMap struct {
	num map[string]int32
	ref map[int32]tableRef
}

// tableRef is what readers need of a numbered table: its id (the
// subkeys' table part) and its name (the object type of its ops that
// leave theirs out: see Writer.objectType).
type tableRef struct{ id, name string }

// load reads every table of group.
func (t *tableNums) load(ctx context.Context, q dbQuerier, group int) (*tableMap, error) {
	rows, err := q.Query(ctx, `SELECT id, table_name, num FROM source_tables WHERE group_id = $1`, group)
	if err != nil {
		return nil, fmt.Errorf("read the table numbers of group %d: %w", group, err)
	}
	g := &tableMap{num: map[string]int32{}, ref: map[int32]tableRef{}}
	var id, name string
	var num int32
	_, err = pgx.ForEachRow(rows, []any{&id, &name, &num}, func() error {
		g.num[id], g.ref[num] = num, tableRef{id, name}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the table numbers of group %d: %w", group, err)
	}
	t.mu.Lock()
	if t.byGroup == nil {
		t.byGroup = map[int]*tableMap{}
	}
	t.byGroup[group] = g
	t.mu.Unlock()
	return g, nil
}

// nums returns the numbers of the tables ids (in order).
func (t *tableNums) nums(ctx context.Context, q dbQuerier, group int, ids []string) ([]int32, error) {
	g, err := t.mapWith(ctx, q, group, ids)
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = g.num[id]
	}
	return out, nil
}

// mapWith returns group's table map once it holds every table of ids,
// reading the tables again (once) when it does not. A map is never
// changed once loaded (a load makes a new one), so callers may keep it.
func (t *tableNums) mapWith(ctx context.Context, q dbQuerier, group int, ids []string) (*tableMap, error) {
	t.mu.Lock()
	g := t.byGroup[group]
	t.mu.Unlock()
	for reloaded := false; ; reloaded = true {
		if g != nil && !slices.ContainsFunc(ids, func(id string) bool { _, ok := g.num[id]; return !ok }) {
			return g, nil
		}
		if reloaded {
			return nil, fmt.Errorf("group %d has no table among %q", group, ids)
		}
		var err error
		if g, err = t.load(ctx, q, group); err != nil {
			return nil, err
		}
	}
}

// table returns the id and name of group's table number num.
func (t *tableNums) table(ctx context.Context, q dbQuerier, group int, num int32) (tableRef, error) {
	t.mu.Lock()
	g := t.byGroup[group]
	t.mu.Unlock()
	if g != nil {
		if ref, ok := g.ref[num]; ok {
			return ref, nil
		}
	}
	g, err := t.load(ctx, q, group)
	if err != nil {
		return tableRef{}, err
	}
	ref, ok := g.ref[num]
	if !ok {
		return tableRef{}, fmt.Errorf("group %d has no table number %d", group, num)
	}
	return ref, nil
}

// tableArg is a probe's table column argument for the table ids: the
// ids (v1) or their numbers (v2).
func (d *db) tableArg(ctx context.Context, q dbQuerier, l *layout, group int, ids []string) (any, error) {
	if !l.interned {
		return ids, nil
	}
	return d.tables.nums(ctx, q, group, ids)
}
