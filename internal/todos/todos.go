// Package todos is the sample "todo lists" data set of SPEC §9: its schema,
// its sync rules and a deterministic (seeded) generator. The demo, the tests
// and the benchmarks load it, so the same seed always gives the same rows.
package todos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Schema creates the two tables and the publication used for streaming.
const Schema = schemaTables + schemaTodoKeys

// schemaTables are the tables with the todos' keys left out, so that
// LoadParallel can build them once, after the rows are in.
const schemaTables = `
CREATE TABLE lists (
  id       uuid PRIMARY KEY,
  name     text NOT NULL,
  owner_id text NOT NULL
);
CREATE TABLE todos (
  id          uuid NOT NULL,
  list_id     uuid NOT NULL,
  description text NOT NULL,
  completed   boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now()
);
`

// schemaTodoKeys are the todos' primary key, foreign key and list index.
const schemaTodoKeys = `
ALTER TABLE todos ADD PRIMARY KEY (id),
  ADD FOREIGN KEY (list_id) REFERENCES lists (id) ON DELETE CASCADE;
CREATE INDEX todos_list_id ON todos (list_id);
`

// Rules are the SPEC §9 sync rules: every list in one global bucket and the
// todos of each list in a bucket of their own.
const Rules = `bucket_definitions:
  global:
    data:
      - SELECT * FROM lists
  by_list:
    parameters: SELECT id AS list_id FROM lists
    data:
      - SELECT * FROM todos WHERE list_id = bucket.list_id
`

// StreamRules are the same data as Sync Streams (edition 3), what the demo
// serves: a user's own lists by default, and the todos of one of them once
// the app subscribes to it (db.syncStream('list_todos', {list_id})).
const StreamRules = `config:
  edition: 3
streams:
  my_lists:
    auto_subscribe: true
    query: SELECT * FROM lists WHERE owner_id = auth.user_id()
  list_todos:
    query: >-
      SELECT * FROM todos WHERE list_id = subscription.parameter('list_id')
      AND list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
`

// Size says how much data to generate.
type Size struct {
	Lists int
	Todos int
	// Seed makes the data reproducible; the same seed gives the same rows.
	Seed uint64
}

// Demo is the small data set `syncpipe demo` loads.
var Demo = Size{Lists: 1000, Todos: 20000, Seed: 1}

var (
	verbs  = []string{"buy", "call", "fix", "write", "review", "plan", "clean", "book", "send", "read", "water", "pay"}
	things = []string{"milk", "the plumber", "the bike", "a letter to grandma", "the pull request", "the trip to Lisbon",
		"the garage", "a dentist appointment", "the invoice", "chapter seven", "the plants", "the electricity bill"}
	whens = []string{"today", "tomorrow morning", "before Friday", "this weekend", "next week", "after lunch", "tonight"}
)

// Generator produces rows deterministically from a seed.
type Generator struct {
	size Size
	rng  *rand.Rand
	base time.Time
}

// NewGenerator returns a generator for size.
func NewGenerator(size Size) *Generator {
	return &Generator{
		size: size,
		rng:  rand.New(rand.NewPCG(size.Seed, 0x5eed)),
		base: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC),
	}
}

func (g *Generator) uuid() uuid.UUID {
	var u uuid.UUID
	hi, lo := g.rng.Uint64(), g.rng.Uint64()
	for i := range 8 {
		u[i] = byte(hi >> (56 - 8*i))
		u[8+i] = byte(lo >> (56 - 8*i))
	}
	u[6] = u[6]&0x0f | 0x40 // version 4 layout, so the ids look like real ones
	u[8] = u[8]&0x3f | 0x80
	return u
}

// ListIDs returns the ids of all lists, in generation order.
func (g *Generator) ListIDs() []uuid.UUID {
	ids := make([]uuid.UUID, g.size.Lists)
	for i := range ids {
		ids[i] = g.uuid()
	}
	return ids
}

// Description returns a todo text of about 60 characters.
func (g *Generator) Description(i int) string {
	s := fmt.Sprintf("%s %s %s (#%d)", verbs[g.rng.IntN(len(verbs))], things[g.rng.IntN(len(things))],
		whens[g.rng.IntN(len(whens))], i)
	if len(s) < 60 {
		s += strings.Repeat(".", 60-len(s))
	}
	return s
}

// Load creates the schema in the database conn is connected to and fills it
// with size rows using COPY. It returns the list ids.
func Load(ctx context.Context, conn *pgx.Conn, size Size) ([]uuid.UUID, error) {
	if size.Lists <= 0 {
		return nil, fmt.Errorf("todos: need at least one list (got %d)", size.Lists)
	}
	if _, err := conn.Exec(ctx, Schema); err != nil {
		return nil, fmt.Errorf("create todo schema: %w", err)
	}
	g := NewGenerator(size)
	lists, err := copyLists(ctx, conn, g)
	if err != nil {
		return nil, err
	}
	if err := copyTodos(ctx, conn, g, lists, 0, size.Todos); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "ANALYZE lists; ANALYZE todos"); err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	return lists, nil
}

// copyLists generates the lists with g and COPYs them in.
func copyLists(ctx context.Context, conn *pgx.Conn, g *Generator) ([]uuid.UUID, error) {
	lists := g.ListIDs()
	_, err := conn.CopyFrom(ctx, pgx.Identifier{"lists"}, []string{"id", "name", "owner_id"},
		pgx.CopyFromSlice(len(lists), func(i int) ([]any, error) {
			return []any{lists[i], fmt.Sprintf("List %d", i), fmt.Sprintf("user%d", i%100)}, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("copy lists: %w", err)
	}
	return lists, nil
}

// copyTodos generates todos lo … hi-1 with g and COPYs them in.
func copyTodos(ctx context.Context, conn *pgx.Conn, g *Generator, lists []uuid.UUID, lo, hi int) error {
	_, err := conn.CopyFrom(ctx, pgx.Identifier{"todos"}, []string{"id", "list_id", "description", "completed", "created_at"},
		pgx.CopyFromFunc(todoRows(g, lists, lo, hi)))
	if err != nil {
		return fmt.Errorf("copy todos: %w", err)
	}
	return nil
}

// todoRows yields todos lo … hi-1: the index numbers a todo's text and its
// created_at, so every part of a parallel load has the shape of Load's.
func todoRows(g *Generator, lists []uuid.UUID, lo, hi int) func() ([]any, error) {
	i := lo
	row := make([]any, 5)
	return func() ([]any, error) {
		if i >= hi {
			return nil, nil
		}
		row[0] = g.uuid()
		row[1] = lists[g.rng.IntN(len(lists))]
		row[2] = g.Description(i)
		row[3] = g.rng.IntN(4) == 0
		row[4] = g.base.Add(time.Duration(i) * time.Second)
		i++
		return row, nil
	}
}
