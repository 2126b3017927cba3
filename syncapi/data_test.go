package syncapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// TestDataInBucketNameOrder: a stream reads a priority's buckets in bucket
// name order, whatever order the rules evaluate them in, because that is
// the order the snapshot lays their ops out in (sendData): the data lines
// follow it, and every op still arrives.
func TestDataInBucketNameOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, todoRules, todoTables, nil)
	var changes []model.Change
	for _, l := range []string{"z", "m", "a", "q"} {
		changes = append(changes, e.upsert("lists", l, "list "+l, "u1"))
		for i := range 3 {
			changes = append(changes, e.upsert("todos", fmt.Sprintf("%s%d", l, i), l, "todo"))
		}
	}
	cp := e.commit(changes...)

	ls := e.open(token(t, "u1", nil), nil).untilComplete()
	var told []string
	for _, b := range ls[0].Checkpoint.Buckets {
		told = append(told, b.Bucket)
	}
	// The premise: the checkpoint names the buckets in another order
	// (global, the first definition, sorts after by_list).
	if slices.IsSorted(told) {
		t.Fatalf("checkpoint buckets %v already in name order: the test shows nothing", told)
	}
	var read []string
	for _, l := range ls {
		if l.Data != nil {
			read = append(read, l.Data.Bucket)
		}
	}
	if !slices.IsSortedFunc(read, strings.Compare) {
		t.Errorf("data lines in bucket order %v, want name order", read)
	}
	c := newClient(t)
	c.apply(ls...)
	if c.complete != opID(cp.OpID) || c.ops != len(changes) {
		t.Fatalf("completed %s with %d ops, want %d with %d", c.complete, c.ops, cp.OpID, len(changes))
	}
}
