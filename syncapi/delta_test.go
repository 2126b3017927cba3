package syncapi

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestCheckpointDeltasServeVerifiedData: six users, each with lists of
// their own, sync while random rounds of writes change todos, move them
// between lists, delete them and give users new lists (a bucket new to a
// caught-up stream, whose older ops no delta holds). Every stream checks
// every line as an SDK would (client.apply: no gap, no op twice, checksums
// and counts at each checkpoint_complete), most of the data comes from the
// checkpoints' shared deltas, and after the first syncs checksum queries
// sum only the new lists' buckets.
func TestCheckpointDeltasServeVerifiedData(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, checkpointDeltasServeVerifiedData)
}

func checkpointDeltasServeVerifiedData(t *testing.T, e protocolEnv) {
	const users, rounds = 6, 12
	user := func(u int) string { return fmt.Sprintf("u%d", u) }
	var setup []model.Change
	lists := map[int][]string{}
	for u := range users {
		for l := range 2 {
			id := fmt.Sprintf("l%d-%d", u, l)
			lists[u] = append(lists[u], id)
			setup = append(setup, e.upsert("lists", id, "L", user(u)), e.upsert("todos", "t-"+id, id, "first"))
		}
	}
	e.commit(setup...)
	streams := make([]*stream, users)
	clients := make([]*client, users)
	for u := range users {
		streams[u], clients[u] = e.open(token(t, user(u), nil), nil), newClient(t)
		clients[u].apply(streams[u].untilComplete()...)
	}
	before := e.counts()
	served := e.server().deltas.served.Load()
	rng := rand.New(rand.NewPCG(7, 11))
	todo, newLists := 0, 0
	for r := range rounds {
		// A list of nobody's changes the global bucket: every stream
		// gets each checkpoint.
		cs := []model.Change{e.upsert("lists", "nobody's", fmt.Sprint(r), "nobody")}
		for range 4 {
			u := rng.IntN(users)
			ls := lists[u]
			switch k := rng.IntN(10); {
			case k < 6: // a new todo, or a moved one
				todo++
				cs = append(cs, e.upsert("todos", fmt.Sprintf("t%d", rng.IntN(todo)), ls[rng.IntN(len(ls))], fmt.Sprintf("r%d", r)))
			case k < 8:
				cs = append(cs, e.delete("todos", fmt.Sprintf("t%d", rng.IntN(todo+1))))
			default: // a new list: a bucket new to the user's stream
				id := fmt.Sprintf("l%d-%d", u, len(ls))
				lists[u] = append(ls, id)
				newLists++
				cs = append(cs, e.upsert("lists", id, "L", user(u)), e.upsert("todos", "t-"+id, id, "new list"))
			}
		}
		cp := e.commit(cs...)
		for u, s := range streams {
			for clients[u].complete != opID(cp.OpID) {
				clients[u].apply(s.untilComplete()...)
			}
		}
	}
	if n := e.server().deltas.served.Load() - served; n < rounds {
		t.Errorf("%d reads served from checkpoint deltas over %d rounds, want at least one a round", n, rounds)
	}
	if got := e.counts().minus(before); got.summed != int64(newLists) {
		t.Errorf("%d buckets summed by a checksum query after the first syncs, want %d: only the new lists' buckets (the deltas give the others' sums)",
			got.summed, newLists)
	}
}

// TestSegmentPlan: ranges are tiled by the segments there are, gaps
// become new segments for the caller to read, and a segment reaching past
// the range's end makes it untileable.
func TestSegmentPlan(t *testing.T) {
	var r deltaReads
	ranges := func(segs []*opSegment) string {
		out := ""
		for _, s := range segs {
			out += fmt.Sprintf("(%d,%d]", s.from, s.to)
		}
		return out
	}
	check := func(from, to int64, wantSegs, wantMine string) {
		t.Helper()
		segs, mine := r.plan(1, from, to)
		if ranges(segs) != wantSegs || ranges(mine) != wantMine {
			t.Fatalf("plan(%d, %d) = %s, new %s; want %s, new %s", from, to, ranges(segs), ranges(mine), wantSegs, wantMine)
		}
	}
	check(10, 20, "(10,20]", "(10,20]")
	check(20, 30, "(20,30]", "(20,30]")
	check(15, 30, "(10,20](20,30]", "")
	check(25, 50, "(20,30](30,50]", "(30,50]")
	check(5, 12, "", "")             // (10,20] ends after 12
	check(0, 10, "(0,10]", "(0,10]") // the gap before the first
	if segs, _ := r.plan(2, 10, 20); ranges(segs) != "(10,20]" {
		t.Fatalf("another group shares nothing: %s", ranges(segs))
	}
	for i := range maxSegments + 5 {
		r.plan(3, int64(100+i), int64(101+i))
	}
	if len(r.segs) != maxSegments {
		t.Fatalf("%d segments kept, want %d", len(r.segs), maxSegments)
	}
}
