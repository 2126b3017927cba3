package syncapi

import (
	"fmt"
	"slices"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// counts are the storage queries a test can attribute to the server: its
// store serves nobody else.
type counts struct {
	params, checksums, summed int64
}

func (e *env) counts() counts {
	st := e.srv.ChecksumStats()
	return counts{params: e.store.Writes().Stats().ParameterQueries, checksums: st.Queries, summed: st.Misses}
}

func (c counts) minus(o counts) counts {
	return counts{c.params - o.params, c.checksums - o.checksums, c.summed - o.summed}
}

// diffBuckets returns the updated bucket names of a checkpoint_diff line.
func diffBuckets(t *testing.T, l line) []string {
	t.Helper()
	if l.CheckpointDiff == nil {
		t.Fatalf("want a checkpoint_diff, got %s", l.Raw)
	}
	var out []string
	for _, b := range l.CheckpointDiff.Updated {
		out = append(out, b.Bucket)
	}
	slices.Sort(out)
	return out
}

// TestIncrementalCheckpointSkipsUnchangedWork: after the first sync, a
// write to one of the client's buckets yields a checkpoint_diff with only
// that bucket, costs no parameter query (the change records show the
// client's lookups did not change) and no checksum query (the
// checkpoint's new ops, read once, give the bucket's checksum). A list of another user changes only the global bucket; a new
// list of the client's changes its lookups, so that checkpoint re-reads
// them. With change records disabled, the same write costs a parameter
// query, which shows the counter sees the query when it runs.
func TestIncrementalCheckpointSkipsUnchangedWork(t *testing.T) {
	t.Parallel()
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("disabled=%v", disabled), func(t *testing.T) {
			t.Parallel()
			onBoth(t, todoRules, todoTables, func(c *Config) { c.Baseline.IgnoreChangeRecords = disabled }, func(t *testing.T, e protocolEnv) {
				incrementalCheckpointSkipsUnchangedWork(t, e, disabled)
			})
		})
	}
}

func incrementalCheckpointSkipsUnchangedWork(t *testing.T, e protocolEnv, disabled bool) {
	e.commit(e.upsert("lists", "a", "A", "u1"), e.upsert("lists", "b", "B", "u1"), e.upsert("lists", "x", "X", "u2"),
		e.upsert("todos", "t1", "a", "one"), e.upsert("todos", "t2", "b", "two"))
	s := e.open(token(t, "u1", nil), nil)
	s.untilComplete()

	before := e.counts()
	cp := e.commit(e.upsert("todos", "t3", "a", "three"))
	ls := s.untilComplete()
	if got := kinds(ls); !slices.Equal(got, []string{"checkpoint_diff", "data", "checkpoint_complete"}) {
		t.Fatalf("disabled=%v: lines %v", disabled, got)
	}
	if got := diffBuckets(t, ls[0]); !slices.Equal(got, []string{e.b("by_list", "a")}) || ls[0].CheckpointDiff.LastOpID != opID(cp.OpID) {
		t.Fatalf("disabled=%v: diff %s, want only by_list a at %d", disabled, ls[0].Raw, cp.OpID)
	}
	got := e.counts().minus(before)
	if disabled {
		// The old path: lookups re-read, all 3 buckets summed.
		if got != (counts{params: 1, checksums: 1, summed: 3}) {
			t.Fatalf("disabled: %+v, want 1 parameter query and 1 checksum query summing 3 buckets", got)
		}
		return
	}
	if got != (counts{}) || e.server().deltas.served.Load() != 1 {
		t.Fatalf("one changed bucket: %+v, %d streams served from a checkpoint delta; want no parameter or checksum query, 1 (the delta gives the checksum)",
			got, e.server().deltas.served.Load())
	}

	// Another user's list: only the global bucket changes for u1, and
	// u1's lookups did not.
	before = e.counts()
	e.commit(e.upsert("lists", "y", "Y", "u2"))
	ls = s.untilComplete()
	if got := diffBuckets(t, ls[0]); !slices.Equal(got, []string{e.b("global")}) {
		t.Fatalf("another user's list: diff %s, want only global", ls[0].Raw)
	}
	if got := e.counts().minus(before); got != (counts{}) {
		t.Fatalf("another user's list: %+v, want no parameter and no checksum query", got)
	}

	// A new list of u1: its lookups changed, so they are re-read and
	// the new (empty) bucket is announced.
	before = e.counts()
	e.commit(e.upsert("lists", "c", "C", "u1"))
	ls = s.untilComplete()
	if got := diffBuckets(t, ls[0]); !slices.Equal(got, []string{e.b("by_list", "c"), e.b("global")}) {
		t.Fatalf("new list of u1: diff %s, want by_list c and global", ls[0].Raw)
	}
	if got := e.counts().minus(before); got.params != 1 {
		t.Fatalf("new list of u1: %+v, want 1 parameter query", got)
	}
}

// TestManyStreamsOneChecksumQuery: 20 clients of different users, each
// with its own lists, are synced; one todo changes: the one client that
// sees it gets a diff. Then a list of nobody's changes the global bucket
// for everybody. Each checkpoint's new ops are read once (delta.go), which
// gives every caught-up stream its data and every changed bucket its
// checksum: no checksum query and no parameter query at all. With change
// records ignored there are no deltas, and the streams asking the same
// read of the global bucket share one (sharedread.go).
func TestManyStreamsOneChecksumQuery(t *testing.T) {
	t.Parallel()
	for _, disabled := range []bool{false, true} {
		t.Run(fmt.Sprintf("disabled=%v", disabled), func(t *testing.T) {
			t.Parallel()
			onBoth(t, todoRules, todoTables, func(c *Config) { c.Baseline.IgnoreChangeRecords = disabled }, func(t *testing.T, e protocolEnv) {
				manyStreamsOneChecksumQuery(t, e, disabled)
			})
		})
	}
}

func manyStreamsOneChecksumQuery(t *testing.T, e protocolEnv, disabled bool) {
	const users = 20
	var setup []model.Change
	for u := range users {
		user := "u" + string(rune('a'+u))
		setup = append(setup, e.upsert("lists", "l-"+user, "L", user), e.upsert("todos", "t-"+user, "l-"+user, "todo"))
	}
	e.commit(setup...)
	streams := make([]*stream, users)
	for u := range users {
		streams[u] = e.open(token(t, "u"+string(rune('a'+u)), nil), nil)
		streams[u].untilComplete()
	}
	before := e.counts()
	cp := e.commit(e.upsert("todos", "t-uc", "l-uc", "changed"))
	ls := streams[2].untilComplete()
	if got := diffBuckets(t, ls[0]); !slices.Equal(got, []string{e.b("by_list", "l-uc")}) {
		t.Fatalf("disabled=%v: diff %s, want only by_list l-uc", disabled, ls[0].Raw)
	}
	copied, reads, served := e.server().reads.copied.Load(), e.server().deltas.reads.Load(), e.server().deltas.served.Load()
	cp2 := e.commit(e.upsert("lists", "l-zz", "Z", "nobody"))
	for u, s := range streams {
		ls := s.untilComplete()
		if last := ls[len(ls)-1].CheckpointComplete.LastOpID; last != opID(cp2.OpID) {
			t.Fatalf("disabled=%v: stream %d completed %s, want %d", disabled, u, last, cp2.OpID)
		}
	}
	copied = e.server().reads.copied.Load() - copied
	reads, served = e.server().deltas.reads.Load()-reads, e.server().deltas.served.Load()-served
	if disabled {
		if copied != users-1 || reads != 0 {
			t.Errorf("no change records: %d streams read the new global op: %d copied another's read, %d checkpoint deltas; want %d and 0",
				users, copied, reads, users-1)
		}
		return
	}
	// The other streams evaluate cp2 from cp or, if they never saw
	// cp, from the checkpoint before: one delta each, at most two.
	if reads < 1 || reads > 2 || served != users || copied != 0 {
		t.Errorf("%d streams read the new global op: %d deltas read, %d streams served from them, %d copied another's read; want 1–2, %d, 0",
			users, reads, served, copied, users)
	}
	if got := e.counts().minus(before); got != (counts{}) {
		t.Fatalf("%d streams over 2 checkpoints (%d, %d) with one changed bucket each: %+v, want no checksum and no parameter query",
			users, cp.OpID, cp2.OpID, got)
	}
}

// counts are the fake's storage queries, as env.counts reads the store's.
func (e *fakeEnv) counts() counts {
	st := e.srv.ChecksumStats()
	e.fake.mu.Lock()
	defer e.fake.mu.Unlock()
	return counts{params: int64(e.fake.lookups), checksums: st.Queries, summed: st.Misses}
}
