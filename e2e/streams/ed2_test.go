package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// edition2Rules are the demo's data as PowerSync's alpha of Sync Streams
// wrote them (edition 2): a bucket definition beside a stream, whose
// priority the alpha ignores.
const edition2Rules = `config:
  edition: 2
bucket_definitions:
  user_lists:
    parameters: SELECT request.user_id() AS owner
    data:
      - SELECT * FROM lists WHERE owner_id = bucket.owner
streams:
  list_todos:
    priority: 0
    query: SELECT * FROM todos WHERE list_id = subscription.parameter('list_id')
`

// TestRunServesEdition2Streams: `syncpipe run` on an edition-2 file serves
// the bucket definition's bucket by default and the stream's to its
// subscription, named as the alpha names it (list_todos|0) and with
// priority 3 whatever the stream says; include_defaults false drops the
// bucket definition's.
func TestRunServesEdition2Streams(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: edition2Rules, Data: &todos.Size{Lists: 6, Todos: 60, Seed: 9}})
	e.Start()
	e.WaitCaughtUp(ctx)
	list, listTodos, userLists := user1List(t, ctx, e)
	todosBucket := `1#list_todos|0["` + list + `"]`
	for _, tc := range []struct {
		defaults bool
		want     map[string]int // bucket → priority
		lists    int
	}{
		{true, map[string]int{`1#user_lists["user1"]`: 3, todosBucket: 3}, userLists},
		{false, map[string]int{todosBucket: 3}, 0},
	} {
		body := fmt.Sprintf(`{"raw_data":true,"streams":{"include_defaults":%t,"subscriptions":[{"stream":"list_todos","parameters":{"list_id":%q}}]}}`, tc.defaults, list)
		got, rows := edition2Checkpoint(t, ctx, harness.OpenStream(t, ctx, e.API, e.Token("user1"), body))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("include_defaults %t: buckets %v, want %v", tc.defaults, got, tc.want)
		}
		if rows["lists"] != tc.lists || rows["todos"] != listTodos {
			t.Errorf("include_defaults %t: data %v, want %d lists and %d todos", tc.defaults, rows, tc.lists, listTodos)
		}
	}
}

// edition2Checkpoint reads a sync stream up to its checkpoint_complete:
// the checkpoint's buckets with their priorities, and the rows received
// by object type.
func edition2Checkpoint(t *testing.T, ctx context.Context, s *harness.RawStream) (map[string]int, map[string]int) {
	t.Helper()
	var cp struct {
		Checkpoint struct {
			Buckets []struct {
				Bucket   string `json:"bucket"`
				Priority int    `json:"priority"`
			} `json:"buckets"`
		} `json:"checkpoint"`
	}
	rows := map[string]int{}
	if err := json.Unmarshal([]byte(syncUntilComplete(t, ctx, s, countPuts(rows))), &cp); err != nil {
		t.Fatal(err)
	}
	buckets := map[string]int{}
	for _, b := range cp.Checkpoint.Buckets {
		buckets[b.Bucket] = b.Priority
	}
	return buckets, rows
}
