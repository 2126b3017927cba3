package bucketstore

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openStore opens a store on a fresh database with one group whose snapshot
// is done, so checkpoints can be published.
func openStore(t testing.TB) (*Store, Group) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, Config{URI: pgtest.NewDB(t), MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	g, err := s.Catalog().CreateGroup(ctx, "bucket_definitions: {}", "syncpipe_")
	if err != nil {
		t.Fatal(err)
	}
	return s, g
}

func newWriter(t testing.TB, s *Store, group int) *Writer {
	t.Helper()
	w, err := s.Writes().NewWriter(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func registerTable(t testing.TB, s *Store, group int, name string) *model.Table {
	t.Helper()
	st, err := s.Catalog().RegisterTable(context.Background(), group, 1234, "public", name, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	return &st.Table
}

func key(i int) [16]byte { return uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "row-%d", i)) }

// put builds a Put with a correct checksum.
func put(bucket, typ, id, data string) model.Put {
	return model.Put{Bucket: bucket, ObjectType: typ, ObjectID: id, Data: []byte(data),
		Checksum: checksum.Put(typ, id, []byte(data))}
}

// op is one row of bucket_data as tests inspect it.
type op struct {
	Bucket   string
	OpID     int64
	Op       int16
	ObjectID string
	Checksum int64
	Data     *string
}

func ops(t testing.TB, s *Store, group int) []op {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT bucket_name, op_id, op, coalesce(object_id, ''), checksum, data
		FROM bucket_ops WHERE group_id = $1 ORDER BY op_id`, group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []op
	for rows.Next() {
		var o op
		if err := rows.Scan(&o.Bucket, &o.OpID, &o.Op, &o.ObjectID, &o.Checksum, &o.Data); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func opSummary(os []op) []string {
	var s []string
	for _, o := range os {
		kind := map[int16]string{OpPut: "PUT", OpRemove: "REMOVE"}[o.Op]
		s = append(s, kind+" "+o.Bucket+" "+o.ObjectID)
	}
	return s
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri := pgtest.NewDB(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			s, err := Open(ctx, Config{URI: uri})
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
	s, err := Open(ctx, Config{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM migrations").Scan(&n); err != nil || n != SchemaVersion {
		t.Fatalf("migrations rows = %d (%v), want %d", n, err, SchemaVersion)
	}
}

func TestRowMovesBetweenBuckets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	k := key(1)

	steps := []struct {
		change model.Change
		want   []string // ops written by this step
	}{
		{model.Change{Table: todos, Kind: model.Upsert, Key: k, Puts: []model.Put{
			put(`1#by_list["a"]`, "todos", "t1", `{"id":"t1","list_id":"a"}`),
			put(`1#global[]`, "todos", "t1", `{"id":"t1","list_id":"a"}`)}},
			[]string{`PUT 1#by_list["a"] t1`, `PUT 1#global[] t1`}},
		{model.Change{Table: todos, Kind: model.Upsert, Key: k, Puts: []model.Put{
			put(`1#by_list["b"]`, "todos", "t1", `{"id":"t1","list_id":"b"}`),
			put(`1#global[]`, "todos", "t1", `{"id":"t1","list_id":"b"}`)}},
			[]string{`REMOVE 1#by_list["a"] t1`, `PUT 1#by_list["b"] t1`, `PUT 1#global[] t1`}},
		{model.Change{Table: todos, Kind: model.Delete, Key: k},
			[]string{`REMOVE 1#by_list["b"] t1`, `REMOVE 1#global[] t1`}},
	}
	seen := 0
	for i, st := range steps {
		if _, err := w.WriteChanges(ctx, []model.Change{st.change}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		all := ops(t, s, g.ID)
		got := opSummary(all[seen:])
		sort.Strings(got)
		want := append([]string(nil), st.want...)
		sort.Strings(want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("step %d ops = %v, want %v", i, got, want)
		}
		seen = len(all)
	}
	// A REMOVE's checksum is the hash of its subkey, and it carries no data.
	subkey := checksum.Subkey(todos.ID, uuid.UUID(k))
	for _, o := range ops(t, s, g.ID) {
		if o.Op == OpRemove && (o.Data != nil || uint32(o.Checksum) != checksum.Remove(subkey)) {
			t.Fatalf("REMOVE %+v: want nil data and checksum %d", o, checksum.Remove(subkey))
		}
	}
	if n := countCurrent(t, s, g.ID, ""); n != 0 {
		t.Fatalf("current rows after delete = %d", n)
	}
}

func TestSnapshotChunkReappliedWritesNoDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	chunk := func(lo, hi int) []model.Change {
		var cs []model.Change
		for i := lo; i < hi; i++ {
			id := fmt.Sprint(i)
			cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
				Puts: []model.Put{put(`1#global[]`, "todos", id, `{"id":"`+id+`"}`)}})
		}
		return cs
	}
	r1, err := w.WriteSnapshot(ctx, chunk(0, 100))
	if err != nil || r1.Rows != 100 || r1.Ops != 100 || r1.Skipped != 0 {
		t.Fatalf("first write: %+v %v", r1, err)
	}
	// A resumed run re-reads a chunk that overlaps what is stored.
	r2, err := w.WriteSnapshot(ctx, chunk(50, 150))
	if err != nil || r2.Rows != 50 || r2.Skipped != 50 || r2.Ops != 50 {
		t.Fatalf("overlapping write: %+v %v", r2, err)
	}
	r3, err := w.WriteSnapshot(ctx, chunk(0, 150))
	if err != nil || r3.Rows != 0 || r3.Ops != 0 || r3.Skipped != 150 {
		t.Fatalf("full re-apply: %+v %v", r3, err)
	}
	all := ops(t, s, g.ID)
	ids := map[string]int{}
	for _, o := range all {
		ids[o.ObjectID]++
	}
	if len(all) != 150 || len(ids) != 150 {
		t.Fatalf("%d ops for %d distinct rows, want 150 each", len(all), len(ids))
	}
}

func TestTruncateRemovesEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	lists := registerTable(t, s, g.ID, "lists")
	var cs []model.Change
	for i := range 25 {
		id := fmt.Sprint(i)
		cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put(`1#by_list["a"]`, "todos", id, `{}`)}})
	}
	cs = append(cs, model.Change{Table: lists, Kind: model.Upsert, Key: key(1000),
		Puts: []model.Put{put(`1#global[]`, "lists", "a", `{}`)}})
	if _, err := w.WriteSnapshot(ctx, cs); err != nil {
		t.Fatal(err)
	}
	res, err := w.Truncate(ctx, todos, 10) // 3 batches
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 25 || res.Rows != 25 {
		t.Fatalf("truncate result %+v, want 25 REMOVEs", res)
	}
	removes := 0
	for _, o := range ops(t, s, g.ID) {
		if o.Op == OpRemove {
			removes++
			if o.Bucket != `1#by_list["a"]` {
				t.Fatalf("truncate of todos removed from %s", o.Bucket)
			}
		}
	}
	if left := countCurrent(t, s, g.ID, lists.ID); left != 1 {
		t.Fatalf("lists rows left = %d, want 1", left)
	}
	if removes != 25 {
		t.Fatalf("%d REMOVEs, want 25", removes)
	}
}

// TestParameterLookupsVersioned checks that a lookup's entries are versioned
// by op id: the entry in force at a checkpoint is the newest at or below it,
// and a row that stops producing a lookup retracts it with an empty entry.
func TestParameterLookupsVersioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	lists := registerTable(t, s, g.ID, "lists")
	lk := func(user string) []byte { return []byte(`["by_user","1","` + user + `"]`) }
	inForce := func(lookup []byte, at int64) string {
		var params string
		err := s.pool.QueryRow(ctx, `SELECT coalesce(string_agg(bucket_parameters, ',' ORDER BY source_key), '')
			FROM (SELECT DISTINCT ON (source_table, source_key) source_key, bucket_parameters
			      FROM bucket_parameters WHERE group_id = $1 AND lookup = $2 AND id <= $3
			      ORDER BY source_table, source_key, id DESC) latest
			WHERE bucket_parameters <> '[]'`, g.ID, lookup, at).Scan(&params)
		if err != nil {
			t.Fatal(err)
		}
		return params
	}
	change := func(user string) model.Change {
		c := model.Change{Table: lists, Kind: model.Upsert, Key: key(7), TracksLookups: true}
		if user != "" {
			c.Lookups = []model.Lookup{{Key: lk(user), Params: []byte(`[{"list_id":"l7"}]`)}}
		}
		return c
	}
	r1, err := w.WriteChanges(ctx, []model.Change{change("alice")})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := w.WriteChanges(ctx, []model.Change{change("bob")}) // owner changes
	if err != nil {
		t.Fatal(err)
	}
	r3, err := w.WriteChanges(ctx, []model.Change{change("")}) // row no longer matches
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		at         int64
		alice, bob string
	}{
		{r1.MaxOpID, `[{"list_id":"l7"}]`, ""},
		{r2.MaxOpID, "", `[{"list_id":"l7"}]`},
		{r3.MaxOpID, "", ""},
	}
	for i, c := range checks {
		if got := inForce(lk("alice"), c.at); got != c.alice {
			t.Errorf("step %d alice = %q, want %q", i, got, c.alice)
		}
		if got := inForce(lk("bob"), c.at); got != c.bob {
			t.Errorf("step %d bob = %q, want %q", i, got, c.bob)
		}
	}
}

func TestErrorStateDoesNotConflictWithWriters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	errs := make(chan error, 4)
	for wi := range 4 {
		go func() {
			w, err := s.Writes().NewWriter(ctx, g.ID)
			if err != nil {
				errs <- err
				return
			}
			defer w.Close()
			for n := range 25 {
				i := wi*1000 + n
				_, err := w.WriteChanges(ctx, []model.Change{{Table: todos, Kind: model.Upsert, Key: key(i),
					Puts: []model.Put{put(`1#global[]`, "todos", fmt.Sprint(i), `{}`)}}})
				if err == nil {
					err = s.Catalog().ReportError(ctx, g.ID, fmt.Sprintf("writer %d hiccup %d", wi, n))
				}
				if err == nil {
					err = s.Catalog().ClearError(ctx, g.ID)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("writer failed (a serialization failure here would mean the error state shares the write transaction): %v", err)
		}
	}
	if n := len(ops(t, s, g.ID)); n != 100 {
		t.Fatalf("%d ops, want 100", n)
	}
	if r := s.Writes().Stats().Retries; r != 0 {
		t.Fatalf("%d write transactions were retried, want 0", r)
	}
}

// TestOpIDBlocks checks that the sequence hands out blocks of opIDBlock
// (the SQL that reads it assumes so) and that writers get ascending,
// distinct ids across blocks: 250 ops of one batch span three blocks.
func TestOpIDBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	var inc int64
	if err := s.pool.QueryRow(ctx, `SELECT increment_by FROM pg_sequences WHERE sequencename = 'op_id_seq'`).Scan(&inc); err != nil {
		t.Fatal(err)
	}
	if inc != opIDBlock {
		t.Fatalf("op_id_seq increments by %d, want opIDBlock = %d", inc, opIDBlock)
	}
	todos := registerTable(t, s, g.ID, "todos")
	w := newWriter(t, s, g.ID)
	var cs []model.Change
	for i := range 250 {
		cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
			Puts: []model.Put{put("b", "todos", fmt.Sprint(i), `{}`)}})
	}
	for range 2 {
		if _, err := w.WriteSnapshot(ctx, cs[:125]); err != nil {
			t.Fatal(err)
		}
		cs = cs[125:]
	}
	got := ops(t, s, g.ID)
	if len(got) != 250 {
		t.Fatalf("%d ops, want 250", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].OpID <= got[i-1].OpID {
			t.Fatalf("op ids not ascending: %d after %d", got[i].OpID, got[i-1].OpID)
		}
	}
	var last int64
	if err := s.pool.QueryRow(ctx, `SELECT `+lastIssuedSQL).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if max := got[len(got)-1].OpID; last < max || last >= max+opIDBlock {
		t.Fatalf("last issued id %d, want in [%d, %d)", last, max, max+opIDBlock)
	}
}

// streamingStore is a group past its snapshot with a "todos" table: what
// the stream writes into and compaction compacts.
func streamingStore(t *testing.T) (*Store, Group, *model.Table) {
	t.Helper()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	if err := s.Catalog().MarkTableSnapshotDone(ctx, todos.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Catalog().MarkSnapshotDone(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	return s, g, todos
}
