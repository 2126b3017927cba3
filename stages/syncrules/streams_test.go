package syncrules

import (
	"slices"
	"testing"
)

// TestStreamHash: the partition order hash gives PowerSync's values for
// plain columns (an expression "?" and its column's name).
func TestStreamHash(t *testing.T) {
	for col, want := range map[string]uint32{"c": 82895985, "owner_id": 104385299, "list_id": 292250135, "user_id": 533226539, "b": 534305345} {
		if got := streamHash("?", col); got != want {
			t.Errorf("streamHash(?, %s) = %d, want %d", col, got, want)
		}
	}
}

// TestStreamTables: the tables a streams file reads include its lookup
// tables, so replication publishes and snapshots them; the file's streams
// line is known.
func TestStreamTables(t *testing.T) {
	src := `config: {edition: 3}
streams:
  my_todos:
    auto_subscribe: true
    query: SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
`
	r, err := Parse([]byte(src), Options{GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tn := range r.Tables() {
		got = append(got, tn.String())
	}
	if want := []string{"public.lists", "public.todos"}; !slices.Equal(got, want) {
		t.Errorf("Tables() = %v, want %v", got, want)
	}
	if r.StreamsLine() != 2 {
		t.Errorf("StreamsLine() = %d, want 2", r.StreamsLine())
	}
	lists, err := r.Bind("lists", []string{"id", "owner_id"})
	if err != nil {
		t.Fatal(err)
	}
	if lists.HasData() || !lists.HasParameters() {
		t.Errorf("lists: HasData %v, HasParameters %v; want only parameters", lists.HasData(), lists.HasParameters())
	}
}
