package bucketstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/stages"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

const listRules = `bucket_definitions:
  by_list:
    parameters: SELECT id AS list_id FROM lists WHERE owner_id = request.user_id()
    data:
      - SELECT * FROM todos WHERE list_id = bucket.list_id
`

// TestParameterRowsEndToEnd goes from source rows through the builder and
// writer to a sync request's buckets: the request's lookups are resolved in
// storage at each checkpoint and turned into bucket ids.
func TestParameterRowsEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rules, err := syncrules.Parse([]byte(listRules), syncrules.Options{GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	lists := registerTable(t, s, g.ID, "lists")
	readyGroup(t, s, g.ID, lists)
	spec, err := stages.NewTableSpec(lists, rules, []string{"id", "name", "owner_id"}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	b := stages.NewBuilder(spec)
	write := func(lsn uint64, rows ...[3]string) int64 {
		t.Helper()
		var cs []model.Change
		for _, r := range rows {
			if cs, err = b.Upsert([]model.Value{model.Text(r[0]), model.Text(r[1]), model.Text(r[2])}, cs); err != nil {
				t.Fatal(err)
			}
		}
		res, err := w.WriteChanges(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		return publishAt(t, s, g.ID, lsn, res.MaxOpID).OpID
	}
	bucketsOf := func(user string, cp int64) []string {
		t.Helper()
		plan, err := rules.Request(syncrules.Request{UserID: user})
		if err != nil {
			t.Fatal(err)
		}
		keys := make([][]byte, len(plan.Lookups))
		for i := range plan.Lookups {
			keys[i] = plan.Lookups[i].Key
		}
		res, err := s.Reader().ParameterRows(ctx, g.ID, cp, keys, 100)
		if err != nil {
			t.Fatal(err)
		}
		var refs []syncrules.BucketRef
		for i := range plan.Lookups {
			for _, rows := range res[i] {
				if refs, err = plan.Lookups[i].Buckets(rows, refs); err != nil {
					t.Fatal(err)
				}
			}
		}
		var ids []string
		for _, r := range refs {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	cp1 := write(10, [3]string{"l1", "Groceries", "u1"}, [3]string{"l2", "Work", "u1"}, [3]string{"l3", "Trips", "u2"})
	cp2 := write(20, [3]string{"l2", "Work", "u2"}) // l2 changes owner
	checks := []struct {
		user string
		cp   int64
		want []string
	}{
		{"u1", cp1, []string{`1#by_list["l1"]`, `1#by_list["l2"]`}},
		{"u2", cp1, []string{`1#by_list["l3"]`}},
		{"u1", cp2, []string{`1#by_list["l1"]`}},
		{"u2", cp2, []string{`1#by_list["l2"]`, `1#by_list["l3"]`}},
		{"u3", cp2, nil},
	}
	for _, c := range checks {
		if got := bucketsOf(c.user, c.cp); !slices.Equal(got, c.want) {
			t.Errorf("%s at %d: buckets %v, want %v", c.user, c.cp, got, c.want)
		}
	}
}

// TestParameterRowsVersionsAndLimit checks the newest entry per source row
// wins at each checkpoint, retractions are dropped, repeated and unknown
// lookups are answered in place, the limit is enforced, and a stopped
// group's lookups fail with ErrGroupStopped.
func TestParameterRowsVersionsAndLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, g := openStore(t)
	w := newWriter(t, s, g.ID)
	lists := registerTable(t, s, g.ID, "lists")
	lk := func(user string) []byte { return []byte(`["by_user","1","` + user + `"]`) }
	change := func(row int, user string) model.Change {
		c := model.Change{Table: lists, Kind: model.Upsert, Key: key(row), TracksLookups: true}
		if user != "" {
			c.Lookups = []model.Lookup{{Key: lk(user), Params: fmt.Appendf(nil, `[{"list_id":"l%d"}]`, row)}}
		}
		return c
	}
	step := func(cs ...model.Change) int64 {
		res, err := w.WriteChanges(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		return res.MaxOpID
	}
	c1 := step(change(1, "alice"), change(2, "alice"), change(3, "bob"))
	c2 := step(change(2, "bob"))                  // row 2 moves to bob
	c3 := step(change(1, ""), change(4, "alice")) // row 1 retracted, row 4 added
	lookups := [][]byte{lk("alice"), lk("bob"), lk("nobody"), lk("alice")}
	want := map[int64][]string{
		c1: {`[{"list_id":"l1"}] [{"list_id":"l2"}]`, `[{"list_id":"l3"}]`, ``, `[{"list_id":"l1"}] [{"list_id":"l2"}]`},
		c2: {`[{"list_id":"l1"}]`, `[{"list_id":"l2"}] [{"list_id":"l3"}]`, ``, `[{"list_id":"l1"}]`},
		c3: {`[{"list_id":"l4"}]`, `[{"list_id":"l2"}] [{"list_id":"l3"}]`, ``, `[{"list_id":"l4"}]`},
	}
	for cp, w := range want {
		res, err := s.Reader().ParameterRows(ctx, g.ID, cp, lookups, 10)
		if err != nil {
			t.Fatal(err)
		}
		for i := range lookups {
			var entries []string
			for _, e := range res[i] {
				entries = append(entries, string(e))
			}
			slices.Sort(entries)
			if got := fmt.Sprint(entries); got != "["+w[i]+"]" {
				t.Errorf("checkpoint %d lookup %s: %s, want [%s]", cp, lookups[i], got, w[i])
			}
		}
	}
	// At c3, alice and bob have 3 entries in force (the retraction of row 1
	// does not count): a limit of 3 passes, 2 fails.
	if _, err := s.Reader().ParameterRows(ctx, g.ID, c3, lookups[:2], 3); err != nil {
		t.Fatalf("limit 3: %v", err)
	}
	if _, err := s.Reader().ParameterRows(ctx, g.ID, c3, lookups[:2], 2); !errors.Is(err, ErrTooManyParameterResults) {
		t.Fatalf("limit 2: err = %v, want ErrTooManyParameterResults", err)
	}
	// Another group's entries never leak in.
	res, err := s.Reader().ParameterRows(ctx, g.ID+1, c3, lookups, 0)
	if err != nil || len(res) != len(lookups) || res[0] != nil {
		t.Fatalf("other group: %q %v, want no entries", res, err)
	}
	// A group taken over is cleared once stopped: its entries are not
	// answered any more, whether some are left or none.
	if err := s.Catalog().SetState(ctx, g.ID, StateStop); err != nil {
		t.Fatal(err)
	}
	for _, lks := range [][][]byte{lookups, {lk("nobody")}} {
		if res, err := s.Reader().ParameterRows(ctx, g.ID, c3, lks, 10); !errors.Is(err, ErrGroupStopped) {
			t.Fatalf("stopped group, lookups %q: %q %v, want ErrGroupStopped", lks, res, err)
		}
	}
}
