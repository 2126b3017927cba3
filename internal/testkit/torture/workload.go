package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Owners are the values of the bucket parameter column (owner) of items
// and docs; a NULL owner puts a row in no bucket.
var Owners = []string{"u0", "u1", "u2", "u3", "u4"}

// Rules are the sync rules the harness replicates: the items and docs of
// an owner in the owner's bucket, every tag in one global bucket. The
// oracle (oracle.go) computes the same with plain SQL.
const Rules = `bucket_definitions:
  by_owner:
    parameters: SELECT request.user_id() AS owner_id
    data:
      - SELECT * FROM items WHERE owner = bucket.owner_id
      - SELECT * FROM docs WHERE owner = bucket.owner_id
  global:
    data:
      - SELECT * FROM tags
`

// Sizes is the initial data set.
type Sizes struct {
	Items, Docs, Tags int
}

// ownerExpr picks an owner per row: one of Owners, or NULL (one in six).
const ownerExpr = `(ARRAY['u0','u1','u2','u3','u4',NULL::text])[1 + floor(random() * 6)::int]`

// Every row version gets a new rev, so that no two versions of a row
// have the same data: a (bucket, row, data) PUT stored twice is a
// duplicate, never a legitimate repeat.
const schemaSQL = `
CREATE SEQUENCE rev_seq;
CREATE FUNCTION big_text(n int) RETURNS text LANGUAGE sql VOLATILE AS
  $$ SELECT string_agg(md5(random()::text), '') FROM generate_series(1, n) $$;
CREATE TABLE items (id bigint PRIMARY KEY, owner text, n int NOT NULL, label text NOT NULL,
  rev bigint NOT NULL DEFAULT nextval('rev_seq'));
CREATE TABLE docs (id bigint PRIMARY KEY, owner text, title text NOT NULL, body text NOT NULL,
  rev bigint NOT NULL DEFAULT nextval('rev_seq'));
-- Stored out of line uncompressed: an UPDATE that leaves body alone
-- sends it as "unchanged TOAST".
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE tags (id bigint PRIMARY KEY, name text NOT NULL,
  rev bigint NOT NULL DEFAULT nextval('rev_seq'));
`

// Setup creates the tables and loads the initial rows.
func Setup(ctx context.Context, conn *pgx.Conn, s Sizes) error {
	if _, err := conn.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	load := []string{
		fmt.Sprintf(`INSERT INTO items (id, owner, n, label) SELECT g, %s, g, 'item ' || g FROM generate_series(1, %d) g`, ownerExpr, s.Items),
		fmt.Sprintf(`INSERT INTO docs (id, owner, title, body) SELECT g, %s, 'doc ' || g, big_text(80 + (g %% 80)) FROM generate_series(1, %d) g`, ownerExpr, s.Docs),
		fmt.Sprintf(`INSERT INTO tags (id, name) SELECT g, 'tag ' || g FROM generate_series(1, %d) g`, s.Tags),
		`ANALYZE items, docs, tags`,
	}
	for _, q := range load {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	return nil
}

// Workload changes the source at random: inserts, updates that move rows
// between buckets, updates of TOASTed values and of other columns only,
// primary key changes, deletes, rolled back transactions, multi-statement
// transactions and now and then a TRUNCATE. Large transactions and ADD
// COLUMN are separate calls, made by the fault controller.
type Workload struct {
	conn *pgx.Conn
	rng  *rand.Rand

	// Redial, if set, opens a new connection when the workload's one is
	// lost (a source restart): Run goes on through it instead of failing.
	// A transaction whose commit was in flight may or may not have
	// committed; the oracle reads the source, so either is fine.
	Redial func(ctx context.Context) (*pgx.Conn, error)

	mu      sync.Mutex
	nextID  int64
	counts  map[string]int
	large   int // large transactions so far
	columns int // columns added so far
	renames int // tables renamed away so far
}

// NewWorkload writes through conn (which it owns while running).
func NewWorkload(conn *pgx.Conn, seed uint64) *Workload {
	return &Workload{conn: conn, rng: rand.New(rand.NewPCG(seed, 17)), nextID: 1_000_000, counts: map[string]int{}}
}

type statement struct {
	kind   string
	weight int
	sql    func(w *Workload) (string, []any)
}

// sample picks n rows of table outside the id ranges of the large
// transactions (from 100M, largeBase), which only LargeTxn changes, so that
// the clients can tell a large transaction seen in part (watchLarge).
func sample(table string, n int) string {
	return fmt.Sprintf(`(SELECT id FROM %s WHERE id < 100000000 ORDER BY random() LIMIT %d)`, table, n)
}

var statements = []statement{
	{"items.insert", 12, func(w *Workload) (string, []any) {
		k := 1 + w.rng.IntN(4)
		return fmt.Sprintf(`INSERT INTO items (id, owner, n, label) SELECT $1::bigint + g, %s, g, 'new ' || ($1::bigint + g) FROM generate_series(0, %d) g`, ownerExpr, k-1), []any{w.ids(k)}
	}},
	{"items.move", 12, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE items SET owner = %s, rev = nextval('rev_seq') WHERE id IN %s`, ownerExpr, sample("items", 1+w.rng.IntN(4))), nil
	}},
	{"items.update", 10, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE items SET n = n + 1, label = 'upd ' || md5(random()::text), rev = nextval('rev_seq') WHERE id IN %s`, sample("items", 1+w.rng.IntN(5))), nil
	}},
	{"items.rekey", 2, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE items SET id = $1, rev = nextval('rev_seq') WHERE id IN %s`, sample("items", 1)), []any{w.ids(1)}
	}},
	{"items.delete", 8, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`DELETE FROM items WHERE id IN %s`, sample("items", 1+w.rng.IntN(3))), nil
	}},
	{"docs.insert", 5, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`INSERT INTO docs (id, owner, title, body) VALUES ($1, %s, 'new doc', big_text(80 + floor(random() * 80)::int))`, ownerExpr), []any{w.ids(1)}
	}},
	{"docs.toast_update", 5, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE docs SET body = big_text(80 + floor(random() * 80)::int), rev = nextval('rev_seq') WHERE id IN %s`, sample("docs", 1+w.rng.IntN(2))), nil
	}},
	{"docs.toast_unchanged", 8, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE docs SET title = 'title ' || md5(random()::text), rev = nextval('rev_seq') WHERE id IN %s`, sample("docs", 1+w.rng.IntN(3))), nil
	}},
	{"docs.move_toast_unchanged", 8, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE docs SET owner = %s, rev = nextval('rev_seq') WHERE id IN %s`, ownerExpr, sample("docs", 1+w.rng.IntN(3))), nil
	}},
	{"docs.delete", 3, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`DELETE FROM docs WHERE id IN %s`, sample("docs", 1)), nil
	}},
	{"tags.insert", 4, func(w *Workload) (string, []any) {
		return `INSERT INTO tags (id, name) VALUES ($1, 'tag ' || md5(random()::text))`, []any{w.ids(1)}
	}},
	{"tags.update", 4, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`UPDATE tags SET name = 'renamed ' || md5(random()::text), rev = nextval('rev_seq') WHERE id IN %s`, sample("tags", 2)), nil
	}},
	{"tags.delete", 2, func(w *Workload) (string, []any) {
		return fmt.Sprintf(`DELETE FROM tags WHERE id IN %s`, sample("tags", 1)), nil
	}},
	{"tags.truncate", 1, func(w *Workload) (string, []any) {
		// TRUNCATE and a refill in one transaction.
		return fmt.Sprintf(`TRUNCATE tags; INSERT INTO tags (id, name) SELECT %d + g, 'refill ' || g FROM generate_series(0, 19) g`, w.ids(20)), nil
	}},
}

var totalWeight = func() int {
	n := 0
	for _, s := range statements {
		n += s.weight
	}
	return n
}()

// ids reserves k consecutive new ids and returns the first.
func (w *Workload) ids(k int) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.nextID
	w.nextID += int64(k)
	return id
}

func (w *Workload) count(kind string) {
	w.mu.Lock()
	w.counts[kind]++
	w.mu.Unlock()
}

func (w *Workload) choose() statement {
	r := w.rng.IntN(totalWeight)
	for _, s := range statements {
		if r < s.weight {
			return s
		}
		r -= s.weight
	}
	return statements[0]
}

// Step runs one random change: mostly a single statement, sometimes a
// transaction of several, sometimes one rolled back.
func (w *Workload) Step(ctx context.Context) error {
	switch r := w.rng.IntN(100); {
	case r < 8: // a transaction of 2–5 statements
		tx, err := w.conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		n := 2 + w.rng.IntN(4)
		for range n {
			s := w.choose()
			q, args := s.sql(w)
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return fmt.Errorf("%s: %w", s.kind, err)
			}
			w.count(s.kind)
		}
		w.count("txn.multi")
		return tx.Commit(ctx)
	case r < 10: // rolled back: nothing of it may show
		tx, err := w.conn.Begin(ctx)
		if err != nil {
			return err
		}
		s := w.choose()
		q, args := s.sql(w)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("%s: %w", s.kind, err)
		}
		w.count("txn.rollback")
		return tx.Rollback(ctx)
	default:
		s := w.choose()
		q, args := s.sql(w)
		if _, err := w.conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("%s: %w", s.kind, err)
		}
		w.count(s.kind)
		return nil
	}
}

// Run calls Step until stop is closed, pausing pace between steps.
func (w *Workload) Run(ctx context.Context, stop <-chan struct{}, pace time.Duration) error {
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if err := w.Step(ctx); tableAway(err) {
			// RenameAway took the table away: its statements wait for
			// it to come back.
			w.count("skipped.table_away")
		} else if err != nil {
			if w.Redial == nil || !w.conn.IsClosed() {
				return err
			}
			if err := w.redial(ctx, stop); err != nil {
				return err
			}
		}
		if pace > 0 {
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pace):
			}
		}
	}
}

// redial replaces the lost connection, trying every 100 ms for up to a
// minute or until stop is closed.
func (w *Workload) redial(ctx context.Context, stop <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := w.Redial(ctx)
		if err == nil {
			_ = w.conn.Close(ctx)
			w.conn = conn
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workload: reconnect to the source: %w", err)
		}
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LargeKind says what the next LargeTxn does ("insert", "move" or
// "delete") and the id range (lo, hi] of its rows.
func (w *Workload) LargeKind(rows int) (kind string, lo, hi int64) {
	w.mu.Lock()
	n := w.large
	w.mu.Unlock()
	lo = largeBase(n)
	return []string{"insert", "move", "delete"}[n%3], lo, lo + int64(rows)
}

// largeBase is the id after which the rows of the n-th large transaction
// lie: each insert, move, delete cycle has a block of its own.
func largeBase(n int) int64 { return 100_000_000 + int64(n/3)*10_000_000 }

// LargeTxn commits one transaction of rows changes through conn (not the
// workload's connection): in turn it inserts a block of rows, moves all
// of them to other buckets, and deletes them.
func (w *Workload) LargeTxn(ctx context.Context, conn *pgx.Conn, rows int) (string, error) {
	w.mu.Lock()
	n := w.large
	w.large++
	w.mu.Unlock()
	base := largeBase(n)
	var kind, q string
	switch n % 3 {
	case 0:
		kind = "large.insert"
		q = fmt.Sprintf(`INSERT INTO items (id, owner, n, label) SELECT %d + g, 'u' || (g %% 5), g, 'bulk ' || g FROM generate_series(1, %d) g`, base, rows)
	case 1:
		kind = "large.move"
		q = fmt.Sprintf(`UPDATE items SET owner = CASE WHEN id %% 7 = 0 THEN NULL ELSE 'u' || ((id + 1) %% 5) END, label = 'moved', rev = nextval('rev_seq')
			WHERE id > %d AND id <= %d`, base, base+int64(rows))
	default:
		kind = "large.delete"
		q = fmt.Sprintf(`DELETE FROM items WHERE id > %d AND id <= %d`, base, base+int64(rows))
	}
	tag, err := conn.Exec(ctx, q)
	if err != nil {
		return kind, fmt.Errorf("%s: %w", kind, err)
	}
	w.count(kind)
	return fmt.Sprintf("%s of %d rows", kind, tag.RowsAffected()), nil
}

// AddColumn adds a column with a default to one of the tables, in turn:
// every stored row of it has to be re-read with the new column.
func (w *Workload) AddColumn(ctx context.Context, conn *pgx.Conn) (string, error) {
	w.mu.Lock()
	k := w.columns
	w.columns++
	w.mu.Unlock()
	table := []string{"items", "tags", "docs"}[k%3]
	q := fmt.Sprintf(`ALTER TABLE %s ADD COLUMN c%d text NOT NULL DEFAULT 'added %d'`, table, k, k)
	if _, err := conn.Exec(ctx, q); err != nil {
		return table, fmt.Errorf("%s: %w", q, err)
	}
	w.count("ddl.add_column")
	return table, nil
}

// awayChanges are the changes RenameAway makes to a table under its other
// name (%[1]s), by table: rows moved between buckets, updated (a doc with
// its TOASTed body unchanged), inserted from $1 on, deleted.
var awayChanges = map[string][]string{
	"items": {
		`UPDATE %[1]s SET owner = ` + ownerExpr + `, n = n + 1, rev = nextval('rev_seq') WHERE id IN ` + sample("%[1]s", 5),
		`INSERT INTO %[1]s (id, owner, n, label) SELECT $1::bigint + g, ` + ownerExpr + `, g, 'while away' FROM generate_series(0, 4) g`,
		`DELETE FROM %[1]s WHERE id IN ` + sample("%[1]s", 2),
	},
	"docs": {
		`UPDATE %[1]s SET title = 'while away ' || md5(random()::text), rev = nextval('rev_seq') WHERE id IN ` + sample("%[1]s", 5),
		`INSERT INTO %[1]s (id, owner, title, body) SELECT $1::bigint + g, ` + ownerExpr + `, 'doc while away', big_text(100) FROM generate_series(0, 4) g`,
		`DELETE FROM %[1]s WHERE id IN ` + sample("%[1]s", 2),
	},
	"tags": {
		`UPDATE %[1]s SET name = 'while away ' || md5(random()::text), rev = nextval('rev_seq') WHERE id IN ` + sample("%[1]s", 5),
		`INSERT INTO %[1]s (id, name) SELECT $1::bigint + g, 'tag while away' FROM generate_series(0, 4) g`,
		`DELETE FROM %[1]s WHERE id IN ` + sample("%[1]s", 2),
	},
}

// RenameAway renames one of the tables (in turn) to another name, changes
// it there (awayChanges), calls hold and renames it back. In one
// transaction (inTxn) the workload's statements on the table wait for it;
// otherwise the rename is committed, so the table is missing while hold
// runs — syncpipe must show that and stop — and the workload skips its
// statements on it.
func (w *Workload) RenameAway(ctx context.Context, conn *pgx.Conn, inTxn bool, hold func()) (string, error) {
	w.mu.Lock()
	k := w.renames
	w.renames++
	w.mu.Unlock()
	table := []string{"tags", "items", "docs"}[k%3]
	away := fmt.Sprintf("%s_away_%d", table, k)
	stmts := []string{fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, table, away)}
	for _, q := range awayChanges[table] {
		stmts = append(stmts, fmt.Sprintf(q, away))
	}
	exec := func(ex interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) error {
		for _, q := range stmts {
			var args []any
			if strings.Contains(q, "$1") {
				args = []any{w.ids(5)}
			}
			if _, err := ex.Exec(ctx, q, args...); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		hold()
		q := fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, away, table)
		if _, err := ex.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		return nil
	}
	how := "committed"
	var err error
	if inTxn {
		how = "in one transaction"
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return exec(tx) })
	} else {
		err = exec(conn)
	}
	if err != nil {
		return table, err
	}
	w.count("ddl.rename_away")
	return fmt.Sprintf("%s renamed to %s and changed there, %s", table, away, how), nil
}

// tableAway reports a statement that failed because its table is renamed
// away (undefined_table).
func tableAway(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// Marker commits a change and returns the source's WAL insert position
// after it: once a checkpoint reaches it, everything before is stored.
func Marker(ctx context.Context, conn *pgx.Conn) (string, error) {
	if _, err := conn.Exec(ctx, `INSERT INTO tags (id, name) VALUES (0, 'marker') ON CONFLICT (id) DO UPDATE SET name = 'marker', rev = nextval('rev_seq')`); err != nil {
		return "", err
	}
	return InsertLSN(ctx, conn)
}

// InsertLSN is the source's WAL insert position.
func InsertLSN(ctx context.Context, conn *pgx.Conn) (string, error) {
	var lsn string
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// Counts returns the changes made so far by kind, as "kind=n" sorted.
func (w *Workload) Counts() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for k, v := range w.counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
