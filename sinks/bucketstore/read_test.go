package bucketstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages/checksum"
)

// readyGroup marks the group's snapshot done so that Commit can publish.
func readyGroup(t testing.TB, s *Store, group int, tables ...*model.Table) {
	t.Helper()
	ctx := context.Background()
	for _, tb := range tables {
		if err := s.Catalog().MarkTableSnapshotDone(ctx, tb.ID, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Catalog().MarkSnapshotDone(ctx, group, 0); err != nil {
		t.Fatal(err)
	}
}

// publishAt publishes a checkpoint covering everything written so far.
func publishAt(t testing.TB, s *Store, group int, lsn uint64, opID int64) Checkpoint {
	t.Helper()
	cp, ok, err := s.Writes().Commit(context.Background(), group, pglogrepl.LSN(lsn), opID)
	if err != nil || !ok {
		t.Fatalf("commit at %d/%d: published=%v err=%v", lsn, opID, ok, err)
	}
	return cp
}

func bucketName(b int) string { return fmt.Sprintf(`1#by_list["b%03d"]`, b) }

// loadSpread writes n rows, row i into bucket i%buckets, so each bucket's
// ops are spread over the whole op id range, and returns the last op id.
func loadSpread(t testing.TB, s *Store, w *Writer, tb *model.Table, n, buckets int) int64 {
	t.Helper()
	var last int64
	for lo := 0; lo < n; lo += 5000 {
		var cs []model.Change
		for i := lo; i < min(lo+5000, n); i++ {
			id := fmt.Sprint(i)
			data := `{"id":"` + id + `","description":"row ` + id + ` with some text to make it realistic"}`
			cs = append(cs, model.Change{Table: tb, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i),
				Puts: []model.Put{put(bucketName(i%buckets), "todos", id, data)}})
		}
		res, err := w.WriteSnapshot(context.Background(), cs)
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, res.MaxOpID)
	}
	return last
}

// storedOp is an op as the naive model expects ReadBucketData to return it.
type storedOp struct {
	bucket           string
	opID             int64
	op               int16
	typ, id, subkey  string
	data             string
	hasData          bool
	sum              uint32
	sourceTable, key string
}

func allOps(t testing.TB, s *Store, group int) []storedOp {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT bucket_name, op_id, op, coalesce(source_table, ''),
		coalesce(source_key::text, ''), coalesce(object_type, ''), coalesce(object_id, ''), checksum, data
		FROM bucket_ops WHERE group_id = $1 ORDER BY bucket_name, op_id`, group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedOp
	for rows.Next() {
		var o storedOp
		var sum int64
		var data *string
		if err := rows.Scan(&o.bucket, &o.opID, &o.op, &o.sourceTable, &o.key, &o.typ, &o.id, &sum, &data); err != nil {
			t.Fatal(err)
		}
		o.sum = uint32(sum)
		if data != nil {
			o.data, o.hasData = *data, true
		}
		if o.sourceTable != "" {
			o.subkey = checksum.Subkey(o.sourceTable, uuid.MustParse(o.key))
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func formatRow(r *OpRow) string {
	d := "<nil>"
	if r.Data != nil {
		d = string(r.Data)
	}
	return fmt.Sprintf("%s %d op=%d %s/%s sub=%s sum=%d data=%s", r.Bucket, r.OpID, r.Op, r.ObjectType, r.ObjectID, r.Subkey, r.Checksum, d)
}

func formatStored(o storedOp) string {
	d := "<nil>"
	if o.hasData {
		d = o.data
	}
	return fmt.Sprintf("%s %d op=%d %s/%s sub=%s sum=%d data=%s", o.bucket, o.opID, o.op, o.typ, o.id, o.subkey, o.sum, d)
}

// TestReadBucketDataPaging pages through buckets with random limits, the way
// the sync API does (continue each bucket from the last op id seen), and
// compares every row and the has-more answers with a naive model.
func TestReadBucketDataPaging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	last := loadSpread(t, s, w, todos, 600, 7)
	// Move some rows between buckets (REMOVE + PUT) and delete some.
	var cs []model.Change
	for i := 0; i < 600; i += 9 {
		id := fmt.Sprint(i)
		c := model.Change{Table: todos, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i),
			Puts: []model.Put{put(bucketName((i+1)%7), "todos", id, `{"id":"`+id+`","moved":true}`)}}
		if i%2 == 0 {
			c = model.Change{Table: todos, Kind: model.Delete, Key: key(i), KeyOrder: keyOrder(i)}
		}
		cs = append(cs, c)
	}
	res, err := w.WriteChanges(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	cp := publishAt(t, s, g.ID, 10, max(last, res.MaxOpID))
	// Ops written after the checkpoint must stay invisible.
	if _, err := w.WriteChanges(ctx, cs[:3]); err != nil {
		t.Fatal(err)
	}
	var model []storedOp
	for _, o := range allOps(t, s, g.ID) {
		if o.opID <= cp.OpID {
			model = append(model, o)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		// Request a random subset of buckets (one unknown), in random order,
		// some from a random op id.
		after := map[string]int64{}
		var order []string
		for _, b := range rng.Perm(8) {
			if rng.IntN(4) == 0 {
				continue
			}
			name := bucketName(b) // bucket 7 has no ops
			order = append(order, name)
			if rng.IntN(3) == 0 {
				after[name] = rng.Int64N(cp.OpID)
			}
		}
		var want []string
		for _, name := range order {
			for _, o := range model {
				if o.bucket == name && o.opID > after[name] {
					want = append(want, formatStored(o))
				}
			}
		}
		var got []string
		limit := 1 + rng.IntN(120)
		for calls := 0; ; calls++ {
			reqs := make([]BucketRequest, len(order))
			for i, name := range order {
				reqs[i] = BucketRequest{Bucket: name, After: after[name]}
			}
			n := 0
			more, err := s.Reader().ReadBucketData(ctx, g.ID, cp.OpID, reqs, limit, func(r *OpRow) error {
				got = append(got, formatRow(r))
				after[r.Bucket] = r.OpID
				n++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n > limit {
				t.Fatalf("round %d: %d rows for limit %d", round, n, limit)
			}
			if more != (len(got) < len(want)) {
				t.Fatalf("round %d call %d: more=%v with %d of %d rows delivered", round, calls, more, len(got), len(want))
			}
			if !more {
				break
			}
			if n != limit {
				t.Fatalf("round %d: more=true after only %d rows (limit %d)", round, n, limit)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d (limit %d): got %d rows, want %d\nfirst got:  %v\nfirst want: %v",
				round, limit, len(got), len(want), head(got), head(want))
		}
	}
	// A REMOVE carries no data and the checksum of its subkey.
	sawRemove := false
	_, err = s.Reader().ReadBucketData(ctx, g.ID, cp.OpID, []BucketRequest{{Bucket: bucketName(0)}}, 1000, func(r *OpRow) error {
		if r.Op == OpRemove {
			sawRemove = true
			if r.Data != nil || r.Checksum != checksum.Remove(r.Subkey) {
				return fmt.Errorf("REMOVE %s: data %q, checksum %d", formatRow(r), r.Data, r.Checksum)
			}
		}
		return nil
	})
	if err != nil || !sawRemove {
		t.Fatalf("remove check: %v (saw remove: %v)", err, sawRemove)
	}
}

func head(s []string) []string { return s[:min(len(s), 3)] }

// TestReadBucketDataCallbackError checks that fn's error stops the read.
func TestReadBucketDataCallbackError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	last := loadSpread(t, s, w, todos, 50, 1)
	stop := fmt.Errorf("enough")
	n := 0
	_, err := s.Reader().ReadBucketData(ctx, g.ID, last, []BucketRequest{{Bucket: bucketName(0)}}, 100, func(*OpRow) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Fatalf("err = %v after %d rows, want %v after 3", err, n, stop)
	}
	if _, err := s.Reader().ReadBucketData(ctx, g.ID, last, nil, 0, nil); err == nil {
		t.Fatal("limit 0 accepted")
	}
}

// planNode is the part of EXPLAIN (FORMAT JSON) the plan test inspects.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	Relation     string     `json:"Relation Name"`
	Index        string     `json:"Index Name"`
	ActualRows   float64    `json:"Actual Rows"`
	ActualLoops  float64    `json:"Actual Loops"`
	SharedHit    int64      `json:"Shared Hit Blocks"`
	SharedRead   int64      `json:"Shared Read Blocks"`
	Plans        []planNode `json:"Plans"`
	IndexCond    string     `json:"Index Cond"`
	RowsFiltered float64    `json:"Rows Removed by Filter"`
}

func walkPlan(n *planNode, f func(n *planNode, path []string), path []string) {
	path = append(path, n.NodeType)
	f(n, path)
	for i := range n.Plans {
		walkPlan(&n.Plans[i], f, path)
	}
}

// readsBucketData reports whether the ops table rel is read below n.
func readsBucketData(n *planNode, rel string) bool {
	found := false
	walkPlan(n, func(n *planNode, _ []string) { found = found || n.Relation == rel }, nil)
	return found
}

func explain(t testing.TB, s *Store, q string, args ...any) (planNode, time.Duration) {
	t.Helper()
	var raw []byte
	if err := s.pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	return parseExplain(t, raw)
}

// parsePlan returns the plan of EXPLAIN (FORMAT JSON) output.
func parsePlan(t testing.TB, raw []byte) planNode {
	t.Helper()
	plan, _ := parseExplain(t, raw)
	return plan
}

func parseExplain(t testing.TB, raw []byte) (planNode, time.Duration) {
	t.Helper()
	var out []struct {
		Plan          planNode `json:"Plan"`
		ExecutionTime float64  `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		t.Fatalf("explain output: %v: %s", err, raw)
	}
	return out[0].Plan, time.Duration(out[0].ExecutionTime * float64(time.Millisecond))
}

// readBench is the data set of the plan test and the benchmark: 50k ops in
// 200 buckets, each bucket's ops spread over the whole op id range.
type readBench struct {
	t    testing.TB
	s    *Store
	g    int
	cp   int64
	reqs []BucketRequest
}

// newReadBench loads the read's test data into a group of storage
// version (see openStoreVersion).
func newReadBench(t testing.TB, version int) *readBench {
	s, g := openStoreVersion(t, version)
	w := newWriter(t, s, g.ID)
	todos := registerTable(t, s, g.ID, "todos")
	readyGroup(t, s, g.ID, todos)
	last := loadSpread(t, s, w, todos, 50000, 200)
	cp := publishAt(t, s, g.ID, 10, last)
	if _, err := s.pool.Exec(context.Background(), "ANALYZE "+testLayout(t, s, g.ID).ops); err != nil {
		t.Fatal(err)
	}
	// A client that is half way through every bucket: each request starts
	// at the op id of its bucket's 125th op.
	rows, err := s.pool.Query(context.Background(), `SELECT bucket_name, op_id FROM (
		SELECT bucket_name, op_id, row_number() OVER (PARTITION BY bucket_name ORDER BY op_id) AS n
		FROM bucket_ops WHERE group_id = $1) x WHERE n = 125 ORDER BY bucket_name`, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	rb := &readBench{t: t, s: s, g: g.ID, cp: cp.OpID}
	for rows.Next() {
		var r BucketRequest
		if err := rows.Scan(&r.Bucket, &r.After); err != nil {
			t.Fatal(err)
		}
		rb.reqs = append(rb.reqs, r)
	}
	if len(rb.reqs) != 200 {
		t.Fatalf("%d buckets, want 200", len(rb.reqs))
	}
	return rb
}

func (rb *readBench) lateralArgs(limit int) []any {
	buckets := make([]string, len(rb.reqs))
	afters := make([]int64, len(rb.reqs))
	for i, r := range rb.reqs {
		buckets[i], afters[i] = r.Bucket, r.After
	}
	return []any{rb.g, bucketKeys(rb.t, rb.s, rb.g, buckets), afters, rb.cp, limit + 1}
}

func (rb *readBench) orChainArgs(limit int) []any {
	args := []any{rb.g, rb.cp}
	for _, r := range rb.reqs {
		args = append(args, r.Bucket, r.After)
	}
	return append(args, limit)
}

// TestReadBucketDataPlan runs EXPLAIN ANALYZE on the read over 50k ops in
// 200 buckets and checks the plan: no sort of bucket_data rows, one primary
// key range scan per bucket visited, and no more rows read than the limit
// (plus one, the has-more probe). The OR-chain shape is explained alongside
// for the record.
func TestReadBucketDataPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 50k ops")
	}
	t.Parallel()
	rb := newReadBench(t, storageV2)
	lay := testLayout(t, rb.s, rb.g)
	opsRel, opsKey, _ := relations(t, rb.s, rb.g)
	for _, limit := range []int{100, 1000} {
		plan, took := explain(t, rb.s, lay.readBucketData, rb.lateralArgs(limit)...)
		var scans, loops, rowsRead float64
		var hit, read int64
		walkPlan(&plan, func(n *planNode, path []string) {
			if strings.Contains(n.NodeType, "Sort") && readsBucketData(n, opsRel) {
				t.Errorf("limit %d: plan sorts bucket_data rows (%s)", limit, strings.Join(path, " > "))
			}
			if n.NodeType == "Nested Loop" {
				// Executed once: its row count is exact (a scan's is a
				// per-loop average), and every bucket_data row the index
				// scans read reaches it (index conditions, no filter).
				rowsRead = n.ActualRows
			}
			if n.Relation == opsRel {
				if n.NodeType != "Index Scan" || n.Index != opsKey || n.RowsFiltered != 0 {
					t.Errorf("limit %d: %s read by %s %s (%v rows filtered), want Index Scan on %s",
						limit, opsRel, n.NodeType, n.Index, n.RowsFiltered, opsKey)
				}
				scans++
				loops += n.ActualLoops
				hit, read = n.SharedHit, n.SharedRead
			}
		}, nil)
		if scans != 1 {
			t.Errorf("limit %d: %v scans of bucket_data, want 1 (repeated per bucket)", limit, scans)
		}
		// Each bucket has 125 ops after its request's position.
		wantLoops := float64((limit + 1 + 124) / 125)
		if loops != wantLoops {
			t.Errorf("limit %d: bucket_data scanned %v times, want %v (stop after the limit)", limit, loops, wantLoops)
		}
		if rowsRead > float64(limit+1) {
			t.Errorf("limit %d: %v bucket_data rows read, want ≤ %d", limit, rowsRead, limit+1)
		}
		// The fully ordered variant, for the record: PostgreSQL cannot tell
		// the nested loop already yields (ord, op_id) order.
		sortedSQL := strings.Replace(lay.readBucketData, "ORDER BY r.ord\n", "ORDER BY r.ord, b.op_id\n", 1)
		sortedPlan, sortedTook := explain(t, rb.s, sortedSQL, rb.lateralArgs(limit)...)
		var sortedNodes []string
		var sortedLoops float64
		walkPlan(&sortedPlan, func(n *planNode, _ []string) {
			sortedNodes = append(sortedNodes, n.NodeType)
			if n.Relation == opsRel {
				sortedLoops = n.ActualLoops
			}
		}, nil)
		t.Logf("limit %d: with ORDER BY r.ord, b.op_id: %v, plan %v, %v index scans", limit, sortedTook, sortedNodes, sortedLoops)
		// The OR chain reads storage version 1 only: BenchmarkReadBucketData
		// compares it.
		t.Logf("limit %d, 200 buckets, 50k ops: LATERAL %v, %v index scans, %v rows read, buffers hit %d read %d",
			limit, took, loops, rowsRead, hit, read)
	}
}

// BenchmarkReadBucketData compares, on the plan test's data, the LATERAL
// read against the OR-chain shape (both reading 1000 rows of 200 buckets),
// for a client half way through every bucket and for a fresh client.
// The data is of storage version 1, which the OR chain reads.
func BenchmarkReadBucketData(b *testing.B) {
	rb := newReadBench(b, storageV1)
	ctx := context.Background()
	halfway := rb.reqs
	fresh := make([]BucketRequest, len(halfway))
	for i, r := range halfway {
		fresh[i] = BucketRequest{Bucket: r.Bucket}
	}
	for _, pos := range []struct {
		name string
		reqs []BucketRequest
	}{{"halfway", halfway}, {"fresh", fresh}} {
		rb.reqs = pos.reqs
		b.Run("lateral/"+pos.name, func(b *testing.B) {
			for b.Loop() {
				n := 0
				if _, err := rb.s.Reader().ReadBucketData(ctx, rb.g, rb.cp, rb.reqs, 1000, func(*OpRow) error { n++; return nil }); err != nil || n != 1000 {
					b.Fatal(n, err)
				}
			}
		})
		b.Run("or-chain/"+pos.name, func(b *testing.B) {
			q := orChainSQL(testLayout(b, rb.s, rb.g), len(rb.reqs))
			args := rb.orChainArgs(1000)
			for b.Loop() {
				rows, err := rb.s.pool.Query(ctx, q, args...)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for rows.Next() {
					n++
				}
				if err := rows.Err(); err != nil || n != 1000 {
					b.Fatal(n, err)
				}
			}
		})
	}
}
