package bucketstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// openStoreV1 is openStore with a group of storage version 1, the layout
// of groups an earlier syncpipe created.
func openStoreV1(t testing.TB) (*Store, Group) {
	t.Helper()
	return openStoreVersion(t, storageV1)
}

// openStoreVersion is openStore with a group of storage version.
func openStoreVersion(t testing.TB, version int) (*Store, Group) {
	t.Helper()
	s, g := openStore(t)
	if version == g.StorageVersion {
		return s, g
	}
	g, err := s.Catalog().createGroup(context.Background(), "bucket_definitions: {}", "syncpipe_", version)
	if err != nil {
		t.Fatal(err)
	}
	return s, g
}

// onVersions runs f in a parallel subtest per storage version, on a
// store with a group of that version.
func onVersions(t *testing.T, f func(t *testing.T, s *Store, g Group)) {
	for _, version := range []int{storageV1, storageV2, storageV3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			t.Parallel()
			s, g := openStoreVersion(t, version)
			if g.StorageVersion != version {
				t.Fatalf("group of storage version %d, want %d", g.StorageVersion, version)
			}
			f(t, s, g)
		})
	}
}

// testLayout returns group's layout.
func testLayout(t testing.TB, s *Store, group int) *layout {
	t.Helper()
	l, err := s.layout(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// relations are the tables (v2: partitions) holding group's ops and
// current rows and the ops' primary key, as plans name them.
func relations(t testing.TB, s *Store, group int) (ops, opsKey, cur string) {
	t.Helper()
	if !testLayout(t, s, group).interned {
		return "bucket_data", "bucket_data_pkey", "current_data"
	}
	ops, cur = testLayout(t, s, group).partitions(group)
	return ops, ops + "_pkey", cur
}

// bucketKeys is a read's bucket argument for names in group's layout.
func bucketKeys(t testing.TB, s *Store, group int, names []string) any {
	t.Helper()
	k, err := s.bucketArg(context.Background(), testLayout(t, s, group), group, names)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// tableKeys is a probe's table argument for ids in group's layout.
func tableKeys(t testing.TB, s *Store, group int, ids []string) any {
	t.Helper()
	k, err := s.tableArg(context.Background(), s.pool, testLayout(t, s, group), group, ids)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// countCurrent counts group's current rows, of table when it is set.
func countCurrent(t testing.TB, s *Store, group int, table string) int64 {
	t.Helper()
	l := testLayout(t, s, group)
	q := `SELECT count(*) FROM ` + l.cur + ` WHERE group_id = $1`
	args := []any{group}
	if table != "" {
		q += ` AND source_table = ($2::` + map[bool]string{false: "text", true: "int4"}[l.interned] + `[])[1]`
		args = append(args, tableKeys(t, s, group, []string{table}))
	}
	var n int64
	if err := s.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// memberBuckets returns the bucket names of a v2 or v3 stored row's
// packed memberships (current_data2.buckets, current_data3.buckets).
func memberBuckets(t testing.TB, s *Store, group int, stored []byte) []string {
	t.Helper()
	var out []string
	compact := testLayout(t, s, group).compactMembers
	if err := checkMembers(stored, compact); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	forMembers(stored, compact, func(m *member) bool { ids = append(ids, m.bucket); return true })
	names, err := s.bucketNamesOf(context.Background(), s.pool, group, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		out = append(out, names[id])
	}
	return out
}

// TestLayoutVersions runs every path over a group of each storage
// version: a snapshot, a random stream history with bucket moves and
// deletes, reads, checksums, compaction, a truncate and Clear, on rows
// with key orders of their own (v3 stores and finds rows by them). The
// package's other tests run on the current version (CreateGroup's), so
// this is the v1 and v2 coverage a storage written by an earlier syncpipe
// relies on.
func TestLayoutVersions(t *testing.T) {
	t.Parallel()
	onVersions(t, func(t *testing.T, s *Store, g Group) {
		ctx := context.Background()
		todos := registerTable(t, s, g.ID, "todos")
		readyGroup(t, s, g.ID, todos)
		w := newWriter(t, s, g.ID)
		loadSpread(t, s, w, todos, 300, 12)
		// A resumed chunk: the same rows again get no ops.
		res := writeSnapshotRows(t, w, todos, 0, 150)
		if res.Rows != 0 || res.Skipped != 150 {
			t.Fatalf("resumed chunk: %+v, want 150 skipped", res)
		}
		cps := randomHistory(t, s, g.ID, w, todos, rand.New(rand.NewPCG(7, uint64(g.StorageVersion))), 20)
		last := cps[len(cps)-1]
		buckets := make([]string, 13)
		for b := range buckets {
			buckets[b] = bucketName(b) // bucket 12 has no op
		}
		checkAll := func(when string) {
			t.Helper()
			want := recompute(t, s, g.ID, last, buckets)
			got, err := s.Reader().NewChecksumCache(0).Checksums(ctx, g.ID, last, buckets)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: checksums %v, want %v", when, got, want)
			}
			var read []BucketChecksum
			for _, b := range buckets {
				sum := BucketChecksum{Bucket: b}
				reqs := []BucketRequest{{Bucket: b}}
				for more := true; more; {
					var err error
					more, err = s.Reader().ReadBucketData(ctx, g.ID, last, reqs, 7, func(r *OpRow) error {
						if r.Op == OpPut && r.Subkey != checksum.Subkey(todos.ID, uuid.UUID(key(mustAtoi(t, r.ObjectID)))) {
							return fmt.Errorf("op %d: subkey %q", r.OpID, r.Subkey)
						}
						sum.Checksum = checksum.Add(sum.Checksum, r.Checksum)
						sum.Count++
						reqs[0].After = r.OpID
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				read = append(read, sum)
			}
			if !slices.Equal(read, want) {
				t.Fatalf("%s: ops read sum to %v, want %v", when, read, want)
			}
		}
		checkAll("written")
		st, err := s.Compactor().Compact(ctx, g.ID, CompactOptions{BatchOps: 5})
		if err != nil || st.Moved == 0 || st.Buckets < 12 {
			t.Fatalf("compaction %+v (%v), want ops moved in 12 buckets", st, err)
		}
		checkAll("compacted")

		if g.StorageVersion >= storageV3 {
			checkKeyOrders(t, s, g.ID)
		}
		rows, err := s.Writes().RowData(ctx, g.ID, []RowRef{{Table: todos.ID, Key: key(1), KeyOrder: keyOrder(1)}})
		if err != nil || len(rows) != 0 {
			t.Fatalf("row data %v (%v), want none stored", rows, err)
		}
		if _, err := w.Truncate(ctx, todos, 7); err != nil {
			t.Fatal(err)
		}
		if n := countCurrent(t, s, g.ID, todos.ID); n != 0 {
			t.Fatalf("%d current rows after truncate", n)
		}
		if _, err := s.Compactor().Clear(ctx, g.ID, ClearOptions{}); err != nil {
			t.Fatal(err)
		}
		var ops int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM bucket_ops WHERE group_id = $1`, g.ID).Scan(&ops); err != nil || ops != 0 {
			t.Fatalf("%d ops after Clear (%v)", ops, err)
		}
	})
}

// keyOrder is the key order of test row i (model.Change.KeyOrder): from
// negative to positive, three rows to a value, so that rows differ in it
// and share it as a source's rows do.
func keyOrder(i int) int32 { return int32(i/3) - 50 }

// checkKeyOrders fails t unless every current row of a v3 group holds its
// row's keyOrder and the partition's primary key leads with it.
func checkKeyOrders(t *testing.T, s *Store, group int) {
	t.Helper()
	ctx := context.Background()
	_, cur := testLayout(t, s, group).partitions(group)
	var def string
	if err := s.pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, cur).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if def != "PRIMARY KEY (source_table, key_order, source_key)" {
		t.Errorf("%s: %s, want the key order before the key", cur, def)
	}
	// Its own parent, its columns in alignment order: the fixed-width
	// ones first, no padding before the varlenas (migration 12).
	var parent, cols string
	err := s.pool.QueryRow(ctx, `SELECT i.inhparent::regclass::text, (SELECT string_agg(attname, ',' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped)
		FROM pg_inherits i WHERE i.inhrelid = $1::regclass`, cur).Scan(&parent, &cols)
	if err != nil {
		t.Fatal(err)
	}
	if want := "group_id,source_table,key_order,source_key,buckets,lookups,data"; parent != "current_data3" || cols != want {
		t.Errorf("%s: a partition of %s with columns %s, want of current_data3 with %s", cur, parent, cols, want)
	}
	rows, err := s.pool.Query(ctx, `SELECT source_key, key_order FROM current_data3 WHERE group_id = $1`, group)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uuid.UUID]int32{}
	for i := range 300 {
		want[key(i)] = keyOrder(i)
	}
	var k uuid.UUID
	var order int32
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&k, &order}, func() error {
		n++
		if w, ok := want[k]; !ok || w != order {
			return fmt.Errorf("row %s has key order %d, want %d (%v)", k, order, w, ok)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("current rows: %d, %v", n, err)
	}
}

// writeSnapshotRows writes rows lo…hi-1 as loadSpread does, in one batch.
func writeSnapshotRows(t testing.TB, w *Writer, tb *model.Table, lo, hi int) Result {
	t.Helper()
	var cs []model.Change
	for i := lo; i < hi; i++ {
		id := fmt.Sprint(i)
		cs = append(cs, model.Change{Table: tb, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i),
			Puts: []model.Put{put(bucketName(i%12), "todos", id, `{"id":"`+id+`"}`)}})
	}
	res, err := w.WriteSnapshot(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func mustAtoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestInternConcurrently: writers interning overlapping names at once,
// each in its own order, neither deadlock nor give a name two ids.
func TestInternConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	const writers, names = 6, 300
	got := make([]map[string]int64, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			var mine []string
			for _, n := range rng.Perm(names)[:names*2/3] {
				mine = append(mine, bucketName(n))
			}
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			// A store of its own per writer: nothing cached, every name
			// goes to storage.
			d := &db{pool: s.pool, names: newBucketNames()}
			got[i], err = d.bucketIDs(ctx, conn, g.ID, mine, true)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]int64{}
	for _, m := range got {
		if len(m) != names*2/3 {
			t.Fatalf("a writer got %d ids for %d names", len(m), names*2/3)
		}
		for n, id := range m {
			if prev, ok := ids[n]; ok && prev != id {
				t.Fatalf("%s has ids %d and %d", n, prev, id)
			}
			ids[n] = id
		}
	}
	var stored, distinct int
	if err := s.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM bucket_names WHERE group_id = $1`, g.ID).Scan(&stored, &distinct); err != nil {
		t.Fatal(err)
	}
	if stored != len(ids) || distinct != stored {
		t.Fatalf("bucket_names holds %d names with %d ids, want %d of each", stored, distinct, len(ids))
	}
}

// TestReaderDoesNotIntern: a bucket nobody wrote reads empty, with
// checksum 0, and asking for it interns nothing.
func TestReaderDoesNotIntern(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g, todos := streamingStore(t)
	w := newWriter(t, s, g.ID)
	res, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Upsert, Key: key(1),
		Puts: []model.Put{put(bucketName(1), "todos", "1", `{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	cp := publishAt(t, s, g.ID, 10, res.MaxOpID)
	unknown := `1#by_list["nobody"]`
	n := 0
	if _, err := s.Reader().ReadBucketData(ctx, g.ID, cp.OpID, []BucketRequest{{Bucket: unknown}, {Bucket: bucketName(1)}}, 10,
		func(r *OpRow) error {
			if r.Bucket != bucketName(1) {
				return fmt.Errorf("op %d of %s", r.OpID, r.Bucket)
			}
			n++
			return nil
		}); err != nil || n != 1 {
		t.Fatalf("read %d ops (%v), want the one of %s", n, err, bucketName(1))
	}
	sums, err := s.Reader().NewChecksumCache(0).Checksums(ctx, g.ID, cp.OpID, []string{unknown})
	if err != nil || sums[0] != (BucketChecksum{Bucket: unknown}) {
		t.Fatalf("checksums %v (%v), want an empty bucket", sums, err)
	}
	var names int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM bucket_names WHERE group_id = $1`, g.ID).Scan(&names); err != nil || names != 1 {
		t.Fatalf("bucket_names holds %d names (%v), want 1: a reader interned", names, err)
	}
}

// TestLayoutClear: Clear empties a v2 group's partitions at once, leaves
// other groups' alone, and the group can be written again.
func TestLayoutClear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g, other := twoGroupsWithRows(t, 100)
	partRows := func(group int) (ops, cur int64) {
		t.Helper()
		o, c := testLayout(t, s, group).partitions(group)
		if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+o+`), (SELECT count(*) FROM `+c+`)`).Scan(&ops, &cur); err != nil {
			t.Fatal(err)
		}
		return ops, cur
	}
	if ops, cur := partRows(g.ID); ops != 100 || cur != 100 {
		t.Fatalf("partitions hold %d ops and %d rows, want 100 of each", ops, cur)
	}
	bytes, err := s.Compactor().GroupBytes(ctx)
	if err != nil || bytes[g.ID] <= 0 || bytes[other.ID] <= 0 {
		t.Fatalf("group bytes %v (%v), want both v2 groups", bytes, err)
	}
	st, err := s.Compactor().Clear(ctx, g.ID, ClearOptions{BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if ops, cur := partRows(g.ID); ops != 0 || cur != 0 {
		t.Fatalf("after Clear the partitions hold %d ops and %d rows", ops, cur)
	}
	// Emptied by TRUNCATE, not by deletes: new files of no pages.
	var pages int64
	o, c := testLayout(t, s, g.ID).partitions(g.ID)
	if err := s.pool.QueryRow(ctx, `SELECT pg_relation_size($1::regclass) + pg_relation_size($2::regclass)`, o, c).Scan(&pages); err != nil || pages != 0 {
		t.Fatalf("partitions of %d bytes after Clear (%v), want 0", pages, err)
	}
	if ops, cur := partRows(other.ID); ops != 100 || cur != 100 {
		t.Fatalf("the other group's partitions hold %d ops and %d rows, want 100 of each", ops, cur)
	}
	t.Logf("clear: %+v", st)
	todos := registerTable(t, s, g.ID, "todos")
	if res := writeSnapshotRows(t, newWriter(t, s, g.ID), todos, 0, 100); res.Rows != 100 || res.Ops != 100 {
		t.Fatalf("write after Clear: %+v, want 100 rows with their ops", res)
	}
}

// TestCurrentRowTodoTuple checks the bytes of the common current row, a
// todo's (one bucket, its table's name as object type, a UUID id, no
// lookups or data): its heap tuple fits 72 bytes, which version 3's
// packed memberships allow and version 2's (3 bytes more) would not.
func TestCurrentRowTodoTuple(t *testing.T) {
	t.Parallel()
	s, g := openStore(t)
	if !testLayout(t, s, g.ID).compactMembers {
		t.Fatalf("storage version %d packs memberships in version 2's form", g.StorageVersion)
	}
	todos := registerTable(t, s, g.ID, "todos")
	id := uuid.UUID(key(1)).String()
	c := model.Change{Table: todos, Kind: model.Upsert, Key: key(1), KeyOrder: 3,
		Puts: []model.Put{put(`1#by_list["a"]`, todos.Name, id, `{"id":"`+id+`"}`)}}
	if _, err := newWriter(t, s, g.ID).WriteSnapshot(context.Background(), []model.Change{c}); err != nil {
		t.Fatal(err)
	}
	var size, members int
	err := s.pool.QueryRow(context.Background(), `SELECT pg_column_size(c.*), length(buckets) FROM current_data3 c WHERE group_id = $1`, g.ID).Scan(&size, &members)
	if err != nil {
		t.Fatal(err)
	}
	// 24 bytes of header with the null bitmap, 28 of fixed-width columns,
	// the memberships with a 1-byte varlena header: 18 bytes with this
	// group's first bucket id (< 128), a todo's 19 with a two-byte one.
	if size > 72 || members != 18 {
		t.Errorf("a todo's current row is %d bytes with %d of memberships, want at most 72 with 18", size, members)
	}
}

// TestStagingTablePerShape checks that layouts whose current rows have
// different shapes stage resumed snapshot rows in differently named
// temporary tables: a writer's pooled connection can stage for a group of
// one version and later for one of another, and the staging table, made
// with CREATE … IF NOT EXISTS (LIKE {cur}), would keep the first shape.
func TestStagingTablePerShape(t *testing.T) {
	t.Parallel()
	byStage := map[string]string{} // staging table → the table it copies
	for version, l := range layouts {
		f := strings.Fields(l.createStage) // CREATE TEMP TABLE IF NOT EXISTS <stage> (LIKE <cur>) …
		if len(f) < 9 || f[7] != "(LIKE" {
			t.Fatalf("v%d: createStage %q", version, l.createStage)
		}
		stage, like := f[6], strings.TrimSuffix(f[8], ")")
		if like != l.cur {
			t.Errorf("v%d: stages like %s, its current rows are in %s", version, like, l.cur)
		}
		if other, ok := byStage[stage]; ok && other != like {
			t.Errorf("v%d: staging table %s is also the one for %s", version, stage, other)
		}
		byStage[stage] = like
		if !strings.Contains(l.copyStage, " "+stage+" ") || !strings.Contains(l.insertStaged, " "+stage+" ") {
			t.Errorf("v%d: copyStage %q or insertStaged %q do not use %s", version, l.copyStage, l.insertStaged, stage)
		}
	}
}
