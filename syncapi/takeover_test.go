package syncapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
)

// mineRules are the rules of the group that takes over in these tests:
// each user's own lists.
const mineRules = `
bucket_definitions:
  mine:
    parameters: SELECT request.user_id() AS owner
    data:
      - SELECT id, name FROM lists WHERE owner_id = bucket.owner
`

// TestTakeoverDuringDownload: a client half-way through its first
// download when a new group takes over and the old one is cleared (its
// later batches find no rows) must not get checkpoint_complete for the
// old group's checkpoint, which it could not verify: the stream goes on
// to the new group's checkpoint and completes that, and the client's
// checksums and counts match it. The stream holds a newer checkpoint
// until the one it sends completes (supersedeAfter: an hour), so the old
// group's reads after the clearing happen whatever the machine's speed.
func TestTakeoverDuringDownload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	e.srv.supersedeAfter = time.Hour
	var lists []model.Change
	for i := range 2500 { // 3 batches of readBatchOps
		lists = append(lists, e.upsert("lists", fmt.Sprintf("l%04d", i), "first", "nobody"))
	}
	first := e.commit(lists...)
	var next bucketstore.Group
	calls := 0
	e.srv.afterDataLine = func() {
		if calls++; calls != 1 {
			return
		}
		next = e.newGroup(mineRules) // its first checkpoint stops the old group
		if _, err := e.store.Compactor().Terminate(e.ctx, e.group.ID, bucketstore.ClearOptions{}); err != nil {
			t.Error(err) // not Fatal: on the stream's goroutine
		}
	}
	s := e.open(token(t, "u1", nil), nil)
	defer s.close()
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...) // verifies checksums and counts at the complete
	done := ls[len(ls)-1].CheckpointComplete
	cp, _, _, err := e.store.Reader().ActiveCheckpoint(e.ctx)
	if err != nil || cp.GroupID != next.ID {
		t.Fatalf("active checkpoint %+v (%v), want group %d's", cp, err, next.ID)
	}
	if done == nil || done.LastOpID != opID(cp.OpID) {
		t.Fatalf("completed %v, want the new group's checkpoint %d (the old group's was %d); lines %v", done, cp.OpID, first.OpID, kinds(ls))
	}
	mine := fmt.Sprintf(`%d#mine["u1"]`, next.ID)
	if len(c.rows) != 1 || c.rows[mine]["lists/a"] == "" {
		t.Fatalf("client holds %v, want list a in %s only", c.rows, mine)
	}
}

// TestStoppedGroupCheckpointSkipped: a checkpoint whose group the
// checksum cache reports stopped (taken over, being cleared: nothing of
// it may be served) is skipped, not an error: the stream stays open,
// announces nothing of it, and serves the new group's checkpoint when it
// comes.
func TestStoppedGroupCheckpointSkipped(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, todoRules, todoTables, nil)
	e.commit(e.upsert("lists", "a", "A", "u1"))
	asked := make(chan struct{})
	e.fake.mu.Lock()
	e.fake.failing["Checksums"] = fmt.Errorf("group %d: %w", e.group.ID, bucketstore.ErrGroupStopped)
	e.fake.checksumsAsked = func() { close(asked); e.fake.checksumsAsked = nil }
	e.fake.mu.Unlock()
	s := e.open(token(t, "u1", nil), nil)
	defer s.close()
	select {
	case <-asked: // the stream evaluates the old group's checkpoint, and fails
	case <-time.After(waitLimit):
		t.Fatal("the stream asked for no checksums")
	}
	e.fake.fail("Checksums", nil)
	next := e.newGroup(mineRules)
	ls := s.untilComplete()
	c := newClient(t)
	c.apply(ls...)
	if ls[0].Checkpoint == nil || ls[len(ls)-1].CheckpointComplete == nil {
		t.Fatalf("lines %v, want the new group's checkpoint, its data and checkpoint_complete", kinds(ls))
	}
	mine := fmt.Sprintf(`%d#mine["u1"]`, next.ID)
	if len(c.rows) != 1 || c.rows[mine]["lists/a"] == "" {
		t.Fatalf("client holds %v, want list a in %s only", c.rows, mine)
	}
}
