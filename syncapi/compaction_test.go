package syncapi

import (
	"fmt"
	"testing"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// TestCompactionDuringDownload: a client half-way through its first
// checkpoint when compaction merges the rest of that checkpoint's ops into
// a CLEAR beyond it (every row updated twice since) reads nothing more
// for that checkpoint — and must not complete it: the stream completes
// the newest checkpoint instead, and the client's checksums and counts
// match it.
func TestCompactionDuringDownload(t *testing.T) {
	t.Parallel()
	onBoth(t, todoRules, todoTables, nil, compactionDuringDownload)
}

func compactionDuringDownload(t *testing.T, e protocolEnv) {
	upsertAll := func(name string) []model.Change {
		var cs []model.Change
		for i := range 2500 {
			cs = append(cs, e.upsert("lists", fmt.Sprintf("l%04d", i), name, "nobody"))
		}
		return cs
	}
	first := e.commit(upsertAll("first")...)
	var last bucketstore.Checkpoint
	var upTo int64
	calls := 0
	e.server().afterDataLine = func() {
		if calls++; calls != 1 {
			return
		}
		e.commit(upsertAll("second")...)
		last = e.commit(upsertAll("third")...)
		e.offered(last)
		upTo = e.compact()
	}
	s := e.open(token(t, "u1", nil), nil)
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...) // verifies checksums and counts at the complete
	done := ls[len(ls)-1].CheckpointComplete
	if done == nil || done.LastOpID != opID(last.OpID) {
		t.Fatalf("completed %v, want the newest checkpoint %d (the first was %d); lines %v", done, last.OpID, first.OpID, kinds(ls))
	}
	if upTo != last.OpID {
		t.Fatalf("compacted up to %d, want %d", upTo, last.OpID)
	}
	if got := len(c.rows[e.b("global")]); got != 2500 {
		t.Fatalf("client holds %d lists, want 2500", got)
	}
}
