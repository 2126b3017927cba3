package bucketstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestPreparedStateReadBeforeAWrite checks state read ahead of writes that
// complete before its own: rows those writes changed are read again inside
// the write, so REMOVEs name the buckets rows are in when their batch is
// applied — not those they were in when the state was read — and rows no
// write touched use the state read ahead as is.
func TestPreparedStateReadBeforeAWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	todos := registerTable(t, s, g.ID, "todos")
	sw := s.Writes().NewStreamWriter(g.ID, Fence{})
	in := func(bucket string, rows ...int) []model.Change {
		var cs []model.Change
		for _, i := range rows {
			cs = append(cs, model.Change{Table: todos, Kind: model.Upsert, Key: key(i),
				Puts: []model.Put{put(bucket, "todos", string(rune('a'+i)), `{}`)}})
		}
		return cs
	}
	lsn := StreamProgress{}
	write := func(cs []model.Change, prep *Prepared) {
		t.Helper()
		lsn.LSN += 10
		if _, err := sw.Write(ctx, cs, lsn, prep); err != nil {
			t.Fatal(err)
		}
	}
	prepare := func(cs []model.Change) *Prepared {
		t.Helper()
		p, err := sw.Prepare(ctx, cs)
		if err != nil || p == nil {
			t.Fatalf("Prepare: %v, %v", p, err)
		}
		return p
	}
	write(in("1#b1[]", 1, 2, 3), nil)

	// Rows 1 and 2 move to b2 after the state of this batch was read: the
	// batch must take them out of b2, and row 3 (untouched) out of b1.
	third := in("1#b3[]", 1, 3)
	early := prepare(third)
	write(in("1#b2[]", 1, 2), nil)
	before := len(ops(t, s, g.ID))
	write(third, early)
	got := opSummary(ops(t, s, g.ID)[before:])
	want := []string{"REMOVE 1#b2[] b", "REMOVE 1#b1[] d", "PUT 1#b3[] b", "PUT 1#b3[] d"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ops of the batch read ahead: %q, want %q", got, want)
	}

	// Back where the state read ahead saw it: the same membership must
	// not spare the REMOVE from where the write in between put it.
	back := in("1#b3[]", 2)
	early = prepare(in("1#b2[]", 2))
	write(back, nil)
	before = len(ops(t, s, g.ID))
	write(in("1#b2[]", 2), early)
	if got := opSummary(ops(t, s, g.ID)[before:]); !slices.Equal(got, []string{"REMOVE 1#b3[] c", "PUT 1#b2[] c"}) {
		t.Fatalf("ops of a row moved back: %q, want its REMOVE from 1#b3[] and PUT", got)
	}

	// A TRUNCATE in between may have changed any row.
	back = in("1#b1[]", 1)
	early = prepare(back)
	if _, err := sw.Prepare(ctx, []model.Change{{Table: todos, Kind: model.Truncate}}); err != nil {
		t.Fatal(err)
	}
	write([]model.Change{{Table: todos, Kind: model.Truncate}}, nil)
	before = len(ops(t, s, g.ID))
	write(back, early)
	if got := opSummary(ops(t, s, g.ID)[before:]); !slices.Equal(got, []string{"PUT 1#b1[] b"}) {
		t.Fatalf("ops after a truncate: %q, want the PUT alone", got)
	}

	// After a failed write nothing read ahead is trusted.
	early = prepare(in("1#b2[]", 1))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sw.Write(cctx, in("1#b4[]", 1), lsn, nil); err == nil {
		t.Fatal("write with a cancelled context succeeded")
	}
	if stale, all := sw.stale(early); !all {
		t.Fatalf("after a failed write: stale %v, want all", stale)
	}
}

// TestAppendCommon checks the merge walk that finds a batch's rows in a
// completed write, on rows whose key orders sort them otherwise than their
// keys do (collapse orders by key order first).
func TestAppendCommon(t *testing.T) {
	a, b := &model.Table{ID: "a"}, &model.Table{ID: "b"}
	var changes []model.Change
	for k := range 40 {
		tb := a
		if k >= 30 {
			tb = b
		}
		changes = append(changes, model.Change{Table: tb, Key: key(k), KeyOrder: int32(k % 7)})
	}
	written := func(c *model.Change) bool { return c.Table == b || int(c.Key[0])%3 == 0 }
	final, _ := collapse(nil, nil, changes)
	var rows []writtenRow
	for _, c := range final {
		if written(c) {
			rows = append(rows, writtenRow{c.Table.ID, c.KeyOrder, c.Key})
		}
	}
	rows = append(rows, writtenRow{"c", 0, key(99)})
	got := appendCommon(nil, final, rows)
	var want []int32
	for i, c := range final {
		if written(c) {
			want = append(want, int32(i))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("appendCommon = %v, want %v", got, want)
	}
}

// TestPreparedInSlices checks a read ahead large enough to be read in
// slices on several connections (readSlices): every row's stored state —
// memberships, lookups, row data, where it is — equals one statement's
// read of the whole batch, on every storage version, and the write that
// uses it takes each row out of the bucket it was in.
func TestPreparedInSlices(t *testing.T) {
	t.Parallel()
	for _, version := range []int{storageV1, storageV2, storageV3} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, g := openStoreVersion(t, version)
			todos := registerTable(t, s, g.ID, "todos")
			sw := s.Writes().NewStreamWriter(g.ID, Fence{})
			const n = 3*probeSliceRows + 17 // three slices, uneven
			batch := func(bucket func(i int) string) []model.Change {
				cs := make([]model.Change, n+1)
				for i := range n {
					c := model.Change{Table: todos, Kind: model.Upsert, Key: key(i), KeyOrder: keyOrder(i),
						Puts: []model.Put{put(bucket(i), "todos", fmt.Sprint(i), `{}`)}}
					if i%5 == 0 {
						c.Lookups = []model.Lookup{{Key: fmt.Appendf(nil, "lk-%d", i), Params: []byte(`[{"x":1}]`)}}
					}
					if i%7 == 0 {
						c.RowData = fmt.Appendf(nil, `{"big":"%d"}`, i)
					}
					cs[i] = c
				}
				// A row storage does not have.
				cs[n] = model.Change{Table: todos, Kind: model.Upsert, Key: key(n + 1), KeyOrder: keyOrder(n + 1),
					Puts: []model.Put{put("1#new[]", "todos", "new", `{}`)}}
				return cs
			}
			if _, err := sw.Write(ctx, batch(func(i int) string { return fmt.Sprintf("1#b%d[]", i%11) })[:n], StreamProgress{LSN: 10}, nil); err != nil {
				t.Fatal(err)
			}
			moved := batch(func(int) string { return "1#moved[]" })
			p, err := sw.Prepare(ctx, moved)
			if err != nil || p == nil {
				t.Fatalf("Prepare: %v, %v", p, err)
			}
			// The same rows read by one statement.
			lay, err := s.layout(ctx, g.ID)
			if err != nil {
				t.Fatal(err)
			}
			var whole prevState
			whole.reset(len(p.final))
			rows, err := s.pool.Query(ctx, lay.loadPrevious, p.probe...)
			if err != nil {
				t.Fatal(err)
			}
			if err := scanPrevious(rows, &whole, lay); err != nil {
				t.Fatal(err)
			}
			found := 0
			for i := range whole.rows {
				a, b := &p.prev.rows[i], &whole.rows[i]
				if a.found != b.found || a.tid != b.tid || !bytes.Equal(p.prev.bytes(a.buckets), whole.bytes(b.buckets)) ||
					!bytes.Equal(p.prev.bytes(a.lookups), whole.bytes(b.lookups)) || !bytes.Equal(p.prev.bytes(a.data), whole.bytes(b.data)) {
					t.Fatalf("row %d read in slices differs from the whole read", i)
				}
				if a.found {
					found++
				}
			}
			if found != n {
				t.Fatalf("%d rows found, want %d", found, n)
			}
			before := len(ops(t, s, g.ID))
			if _, err := sw.Write(ctx, moved, StreamProgress{LSN: 20}, p); err != nil {
				t.Fatal(err)
			}
			removes := 0
			for _, o := range opSummary(ops(t, s, g.ID)[before:]) {
				if strings.HasPrefix(o, "REMOVE 1#b") {
					removes++
				}
			}
			if removes != n {
				t.Fatalf("%d REMOVEs from the rows' old buckets, want %d", removes, n)
			}
		})
	}
}
