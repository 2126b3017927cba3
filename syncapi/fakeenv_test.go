package syncapi

import (
	"context"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	noopmetric "go.opentelemetry.io/otel/metric/noop"

	"github.com/syncpipe/syncpipe/config"
	"github.com/syncpipe/syncpipe/model"
	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// fakeEnv is an env whose Server serves a fakeStore: the harness's
// streams, tokens, rows and client checks work unchanged, and commit
// publishes through the fake instead of PostgreSQL.
type fakeEnv struct {
	*env
	fake *fakeStore
}

// newFakeEnv serves rules over tables (name → columns, id first) from a
// fake store; tweak may edit the Config.
func newFakeEnv(t *testing.T, rules string, tables map[string][]string, tweak func(*Config)) *fakeEnv {
	t.Helper()
	const groupID = 7
	parsed, err := syncrules.Parse([]byte(rules), syncrules.Options{GroupID: strconv.Itoa(groupID)})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: context.Background(), group: bucketstore.Group{ID: groupID}, rules: parsed, tables: map[string]*testTable{}}
	for name, cols := range tables {
		bound, err := parsed.Bind(name, cols)
		if err != nil {
			t.Fatal(err)
		}
		tbl := &model.Table{ID: "tbl-" + name, GroupID: groupID, Schema: "public", Name: name}
		e.tables[name] = &testTable{table: tbl, bound: bound, ev: bound.NewEvaluator()}
	}
	fe := &fakeEnv{env: e, fake: newFakeStore(groupID, rules)}
	cfg := Config{Groups: fe.fake, Store: fe.fake, Checksums: fe.fake, Checkpoints: fe.fake,
		Auth: config.Auth{Audience: []string{testAudience}, HS256Secrets: []string{testSecret}, MaxLifetime: 24 * time.Hour},
		SourceLSN: func(context.Context) (pglogrepl.LSN, error) {
			return pglogrepl.LSN(e.sourceLSN.Load()), nil
		},
		MeterProvider: noopmetric.NewMeterProvider()}
	if tweak != nil {
		tweak(&cfg)
	}
	// Like bucket storage, the fake keeps change records, unless the
	// config ignores them (the baseline switches bucketstore's cache, so
	// here it is the fake that does without).
	if cfg.Baseline.IgnoreChangeRecords && cfg.Checksums == fe.fake {
		cfg.Baseline.IgnoreChangeRecords = false
	} else {
		fe.fake.recordChanges()
	}
	if e.srv, err = New(e.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(e.srv.Handler())
	t.Cleanup(e.http.Close)
	t.Cleanup(e.srv.Close)
	return fe
}

// commit writes changes and publishes a checkpoint over them at the next
// LSN, like env.commit.
func (e *fakeEnv) commit(changes ...model.Change) bucketstore.Checkpoint {
	e.t.Helper()
	for _, c := range changes {
		if c.Kind != model.Upsert && c.Kind != model.Delete {
			e.t.Fatalf("the fake store writes upserts and deletes only, got %v", c.Kind)
		}
	}
	return e.publish(e.fake.write(changes...))
}

// publish publishes a checkpoint at opID and the next LSN (a keepalive
// when opID is the previous checkpoint's).
func (e *fakeEnv) publish(opID int64) bucketstore.Checkpoint {
	e.lsn += 16
	return e.fake.publish(opID, pglogrepl.LSN(e.lsn))
}

// protocolEnv is what a protocol test drives, whichever storage serves
// it: env (PostgreSQL) and fakeEnv (the fake) both are one.
type protocolEnv interface {
	upsert(table string, vals ...string) model.Change
	delete(table, id string) model.Change
	commit(changes ...model.Change) bucketstore.Checkpoint
	open(tok string, body map[string]any) *stream
	b(def string, params ...string) string
	// server is the Server under test (its test hooks).
	server() *Server
	// offered waits until every stream has been offered cp.
	offered(cp bucketstore.Checkpoint)
	// compact compacts every bucket up to the last checkpoint and
	// returns it.
	compact() int64
	// newGroup deploys rules (over lists) as a new group holding list a
	// of u1 and publishes its first checkpoint, which makes it ACTIVE.
	newGroup(rules string) bucketstore.Group
	// counts are the storage queries the server made so far.
	counts() counts
}

// onBoth runs a protocol test on the fake ("fake": no PostgreSQL, so it
// runs with -short) and on bucket storage ("postgres": the same answers
// from the real store).
func onBoth(t *testing.T, rules string, tables map[string][]string, tweak func(*Config), test func(t *testing.T, e protocolEnv)) {
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		test(t, newFakeEnv(t, rules, tables, tweak))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, newEnv(t, rules, tables, tweak))
	})
}

// newGroup deploys rules as the fake's new ACTIVE group, writes list a
// of u1 to it and publishes it, like env.newGroup.
func (e *fakeEnv) newGroup(rules string) bucketstore.Group {
	e.t.Helper()
	g := e.fake.deploy(rules)
	parsed, err := syncrules.Parse([]byte(rules), syncrules.Options{GroupID: strconv.Itoa(g.ID)})
	if err != nil {
		e.t.Fatal(err)
	}
	bound, err := parsed.Bind("lists", todoTables["lists"])
	if err != nil {
		e.t.Fatal(err)
	}
	tbl := &model.Table{ID: "tbl-lists-" + strconv.Itoa(g.ID), GroupID: g.ID, Schema: "public", Name: "lists"}
	e2 := &fakeEnv{env: &env{t: e.t, ctx: e.ctx, group: g, rules: parsed, lsn: e.lsn,
		tables: map[string]*testTable{"lists": {table: tbl, bound: bound, ev: bound.NewEvaluator()}}}, fake: e.fake}
	e2.commit(e2.upsert("lists", "a", "A", "u1"))
	e.lsn = e2.lsn
	return g
}

// offered returns at once: the fake's publish offers a checkpoint to
// every subscriber before it returns.
func (e *fakeEnv) offered(bucketstore.Checkpoint) {}

// compact compacts the fake up to its last published checkpoint.
func (e *fakeEnv) compact() int64 {
	e.fake.mu.Lock()
	upTo := e.fake.latest.OpID
	e.fake.mu.Unlock()
	e.fake.compact(upTo)
	return upTo
}

// bucketNames lists a checkpoint line's buckets, sorted.
func bucketNames(bs []bucketJSON) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Bucket)
	}
	slices.Sort(out)
	return out
}
