package syncapi

import (
	"slices"
	"testing"
)

// stagedStreamRules nest a subquery in a subquery: the todos of the lists
// owned by the users the request's user's lists are named after (the inner
// lookup's names key the outer one).
const stagedStreamRules = `
config:
  edition: 3
streams:
  peer_todos:
    auto_subscribe: true
    query: >-
      SELECT id, description FROM todos WHERE list_id IN (SELECT id FROM lists
      WHERE owner_id IN (SELECT name FROM lists WHERE owner_id = auth.user_id()))
`

// TestStreamsStagedLookups: a stream with nested subqueries resolves its
// lookups in stages at every checkpoint: the first checkpoint has a
// bucket per list the inner lookup's rows lead to, and a replicated list
// that the outer lookup now finds adds its bucket in a checkpoint_diff.
func TestStreamsStagedLookups(t *testing.T) {
	t.Parallel()
	onBoth(t, stagedStreamRules, todoTables, nil, streamsStagedLookups)
}

func streamsStagedLookups(t *testing.T, e protocolEnv) {
	e.commit(e.upsert("lists", "a", "u2", "u1"), e.upsert("lists", "b", "B", "u2"), e.upsert("lists", "z", "Z", "u3"),
		e.upsert("todos", "t1", "b", "in b"))
	s := e.open(token(t, "u1", nil), subscribe())
	ls := s.untilComplete()
	if ls[0].Checkpoint == nil {
		t.Fatalf("first line %s, want a checkpoint", ls[0].Raw)
	}
	if got := bucketNames(ls[0].Checkpoint.Buckets); !slices.Equal(got, []string{e.b("peer_todos|0", "b")}) {
		t.Errorf("first checkpoint: buckets %v, want peer_todos for list b", got)
	}
	e.commit(e.upsert("lists", "c", "C", "u2"))
	if ls := s.until(func(l line) bool { return l.CheckpointDiff != nil }); !slices.Equal(diffBuckets(t, ls[len(ls)-1]), []string{e.b("peer_todos|0", "c")}) {
		t.Errorf("after list c: %s, want peer_todos for list c added", ls[len(ls)-1].Raw)
	}
}
