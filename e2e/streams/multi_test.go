package streams

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/todos"
)

// multiLookupRules are Sync Streams whose buckets need several parameter
// lookups: team_todos nests a subquery in a subquery (the user's teams,
// then the lists shared with them), done_todos has two subqueries whose
// results multiply (the user's lists × the completion states they chose).
const multiLookupRules = `config:
  edition: 3
streams:
  team_todos:
    auto_subscribe: true
    query: >-
      SELECT * FROM todos WHERE list_id IN (SELECT list_id FROM team_lists
      WHERE team IN (SELECT team FROM members WHERE user_id = auth.user_id()))
  done_todos:
    auto_subscribe: true
    query: >-
      SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
      AND completed IN (SELECT done FROM prefs WHERE user_id = auth.user_id())
`

// TestRunServesMultiLookupStreams: `syncpipe run` serves streams with two
// subqueries and with nested ones from real PostgreSQL: the checkpoint has
// a team_todos bucket for each list shared with one of the user's teams
// (the inner lookup's rows key the outer one) and a done_todos bucket for
// each of the user's lists with each completion state they chose (both),
// and the data lines hold exactly the todos each bucket's query selects.
func TestRunServesMultiLookupStreams(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: multiLookupRules})
	lists, err := todos.Load(ctx, e.Src, todos.Size{Lists: 30, Todos: 300, Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	e.Exec(ctx, `CREATE TABLE members (id text PRIMARY KEY, user_id text NOT NULL, team text NOT NULL);
		CREATE TABLE team_lists (id text PRIMARY KEY, team text NOT NULL, list_id uuid NOT NULL);
		CREATE TABLE prefs (id text PRIMARY KEY, user_id text NOT NULL, done boolean NOT NULL);
		INSERT INTO members VALUES ('m1', 'user1', 'red'), ('m2', 'user1', 'blue'), ('m3', 'user2', 'green');
		INSERT INTO prefs VALUES ('p1', 'user1', true), ('p2', 'user2', false), ('p3', 'user1', false)`)
	shared := []string{lists[0].String(), lists[5].String(), lists[7].String()}
	e.Exec(ctx, `INSERT INTO team_lists VALUES ('t1', 'red', '`+shared[0]+`'), ('t2', 'red', '`+shared[1]+`'),
		('t3', 'blue', '`+shared[2]+`'), ('t4', 'green', '`+lists[9].String()+`')`)
	e.Start()
	e.WaitCaughtUp(ctx)
	var teamTodos, doneTodos, ownLists int
	if err := e.Src.QueryRow(ctx, `SELECT (SELECT count(*) FROM todos WHERE list_id::text = ANY($1)),
		(SELECT count(*) FROM todos t JOIN lists l ON t.list_id = l.id WHERE l.owner_id = 'user1'),
		(SELECT count(*) FROM lists WHERE owner_id = 'user1')`, shared).Scan(&teamTodos, &doneTodos, &ownLists); err != nil {
		t.Fatal(err)
	}
	buckets, puts := multiLookupCheckpoint(t, ctx, e)
	var teamBuckets []string
	done := 0
	for _, b := range buckets {
		switch {
		case strings.HasPrefix(b, `1#team_todos|0["`):
			teamBuckets = append(teamBuckets, strings.TrimSuffix(strings.TrimPrefix(b, `1#team_todos|0["`), `"]`))
		case strings.HasPrefix(b, "1#done_todos|0["):
			done++
		default:
			t.Errorf("unexpected bucket %s", b)
		}
	}
	slices.Sort(teamBuckets)
	want := slices.Sorted(slices.Values(shared))
	if !slices.Equal(teamBuckets, want) {
		t.Errorf("team_todos buckets for lists %v, want %v", teamBuckets, want)
	}
	if done != 2*ownLists {
		t.Errorf("%d done_todos buckets, want one per list of user1 (%d) and completion state of theirs (2)", done, ownLists)
	}
	if puts["team_todos"] != teamTodos || puts["done_todos"] != doneTodos {
		t.Errorf("data: %v, want %d team_todos and %d done_todos rows", puts, teamTodos, doneTodos)
	}
}

// shapeRules are Sync Streams in the forms a user writes besides plain
// subqueries: a top-level CTE, an inner join (its rows typed by the alias),
// an expression on the column side, and ->> on a JSON column, which edition
// 3 reads with fixed_json_extract ('org.unit' is one key, not a path).
const shapeRules = `config:
  edition: 3
with:
  my_lists: SELECT id FROM lists WHERE owner_id = auth.user_id()
streams:
  cte_todos:
    auto_subscribe: true
    query: SELECT * FROM todos WHERE list_id IN my_lists
  joined:
    auto_subscribe: true
    query: SELECT t.* FROM todos t JOIN lists l ON t.list_id = l.id WHERE l.owner_id = auth.user_id()
  by_owner:
    auto_subscribe: true
    query: SELECT * FROM lists WHERE lower(owner_id) = auth.user_id()
  tagged:
    auto_subscribe: true
    query: SELECT * FROM tags WHERE meta ->> 'org.unit' = auth.user_id()
`

// TestRunServesStreamShapes: `syncpipe run` serves a CTE, a join, a
// column-side expression and a JSON key from real PostgreSQL: a bucket per
// list of user1 for the CTE and the join streams with exactly their todos,
// user1's lists, and the one tag whose key "org.unit" is user1 (read as
// the path org → unit, edition 1's way, two other tags would match).
func TestRunServesStreamShapes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := harness.New(t, harness.Options{Rules: shapeRules, Data: &todos.Size{Lists: 30, Todos: 300, Seed: 11}})
	e.Exec(ctx, `CREATE TABLE tags (id text PRIMARY KEY, meta jsonb NOT NULL);
		INSERT INTO tags VALUES ('dotted', '{"org.unit": "user1"}'), ('nested', '{"org": {"unit": "user1"}}'),
			('nested2', '{"org": {"unit": "user1"}}'), ('other', '{"org.unit": "user2"}')`)
	// validate, a child process like run, accepts the forms against the
	// source's tables.
	code, stdout, stderr := harness.Run(t, ctx, "validate", "--config", e.Config)
	if out := stdout + stderr; code != 0 || !strings.Contains(out, "4 sync stream(s) over 3 table(s)") {
		t.Fatalf("validate: exit %d: %s, want 4 streams over 3 tables", code, out)
	}
	e.Start()
	e.WaitCaughtUp(ctx)
	var ownLists, ownTodos int
	if err := e.Src.QueryRow(ctx, `SELECT (SELECT count(*) FROM lists WHERE owner_id = 'user1'),
		(SELECT count(*) FROM todos t JOIN lists l ON t.list_id = l.id WHERE l.owner_id = 'user1')`).Scan(&ownLists, &ownTodos); err != nil {
		t.Fatal(err)
	}
	buckets, puts := multiLookupCheckpoint(t, ctx, e)
	perStream := map[string]int{}
	for _, b := range buckets {
		stream, _, _ := strings.Cut(strings.TrimPrefix(b, "1#"), "|")
		perStream[stream]++
	}
	wantBuckets := map[string]int{"cte_todos": ownLists, "joined": ownLists, "by_owner": 1, "tagged": 1}
	wantPuts := map[string]int{"cte_todos": ownTodos, "joined": ownTodos, "by_owner": ownLists, "tagged": 1}
	for s := range wantBuckets {
		if perStream[s] != wantBuckets[s] || puts[s] != wantPuts[s] {
			t.Errorf("%s: %d buckets, %d rows; want %d and %d (buckets %v)", s, perStream[s], puts[s], wantBuckets[s], wantPuts[s], buckets)
		}
	}
	if ownLists == 0 || ownTodos == 0 {
		t.Fatalf("user1 has %d lists and %d todos: the data set tests nothing", ownLists, ownTodos)
	}
}
