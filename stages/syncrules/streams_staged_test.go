package syncrules

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestResolveStaged: a stream with a subquery and a nested one is one
// staged lookup; ResolveStaged queries the innermost lookup first, then
// the outer one (keyed by its outputs) with the other subquery, one query
// per stage, and builds the buckets from the product of their rows. A
// stream with one subquery keeps its plain Lookup; a query error stops
// the resolution, a bad stored row set is reported and skipped.
func TestResolveStaged(t *testing.T) {
	const rules = "config:\n  edition: 3\nstreams:\n  s:\n    auto_subscribe: true\n    query: SELECT * FROM todos WHERE tag IN (SELECT tag FROM tags WHERE user_id = auth.user_id())" +
		" AND list_id IN (SELECT id FROM lists WHERE org IN (SELECT id FROM orgs WHERE admin = auth.user_id()))\n" +
		"  one:\n    auto_subscribe: true\n    query: SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner = auth.user_id())\n"
	r, err := Parse([]byte(rules), Options{GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := r.Request(Request{UserID: "u1", Claims: []byte(`{"sub":"u1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Staged) != 1 || len(plan.Lookups) != 1 || string(plan.Lookups[0].Key) != `["lookup","3","u1"]` {
		t.Fatalf("plan: %d staged, lookups %v; want 1 staged and one plain lookup", len(plan.Staged), plan.Lookups)
	}
	stored := map[string][]string{
		`["lookup","0","u1"]`: {`[{"0":"o1"}]`, `[{"0":"o2"}]`},
		`["lookup","1","u1"]`: {`[{"0":"red"}]`, `[{"0":"blue"}]`},
		`["lookup","2","o1"]`: {`[{"0":"l1"}]`},
		`["lookup","2","o2"]`: {`[{"0":"l2"}]`, `not json`},
	}
	var calls []string
	query := func(keys [][]byte) ([][][]byte, error) {
		sets := make([][][]byte, len(keys))
		var ks []string
		for i, k := range keys {
			ks = append(ks, string(k))
			for _, s := range stored[string(k)] {
				sets[i] = append(sets[i], []byte(s))
			}
		}
		calls = append(calls, strings.Join(ks, " "))
		return sets, nil
	}
	refs, bad, err := plan.ResolveStaged(query, nil)
	if err != nil || bad == nil {
		t.Fatalf("ResolveStaged: bad %v, err %v; want the bad row set reported", bad, err)
	}
	wantCalls := []string{`["lookup","0","u1"]`, `["lookup","1","u1"] ["lookup","2","o1"] ["lookup","2","o2"]`}
	if !slices.Equal(calls, wantCalls) {
		t.Errorf("queries:\n got  %q\n want %q", calls, wantCalls)
	}
	var ids []string
	for _, b := range refs {
		ids = append(ids, b.ID)
	}
	slices.Sort(ids)
	want := []string{`1#s|0["blue","l1"]`, `1#s|0["blue","l2"]`, `1#s|0["red","l1"]`, `1#s|0["red","l2"]`}
	if !slices.Equal(ids, want) {
		t.Errorf("buckets:\n got  %v\n want %v", ids, want)
	}
	boom := errors.New("boom")
	if _, _, err := plan.ResolveStaged(func([][]byte) ([][][]byte, error) { return nil, boom }, nil); !errors.Is(err, boom) {
		t.Errorf("a failing query: %v, want it returned", err)
	}
}
