package badinput

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
)

// validateCase is one `syncpipe validate` run of TestValidateAgainstSource.
type validateCase struct {
	name, uri string
}

// TestValidateAgainstSource: `syncpipe validate` (a child process) checks
// what `run` needs of the source, and says in one line why it could not
// look. A source `run` would refuse (no primary key, a publication that
// lacks a rules table, a role without REPLICATION that may not create the
// publication, wal_level = replica), a wrong password and a malformed URI
// (port 99999, a bare postgres://, sslmode=require against a server
// without TLS) exit 2; a source that is not reached (connection refused,
// a host that does not resolve) is a warning, exit 0, and the file is
// judged alone. Exit codes and output are checked against
// testdata/validate_source.golden (run with -update to rewrite it).
func TestValidateAgainstSource(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	replica := make(chan *replicaServer, 1)
	go func() { // initdb takes seconds: start it while the shared server's cases run
		r, err := startReplicaServer(t)()
		if err != nil {
			t.Errorf("replica server: %v", err)
		}
		replica <- r
	}()
	items := `CREATE TABLE items (id text PRIMARY KEY, name text)`
	okDB := newValidateDB(t, items)
	noPK := newValidateDB(t, `CREATE TABLE items (id text, name text)`)
	unpublished := newValidateDB(t, items, `CREATE TABLE other (id int PRIMARY KEY)`, `CREATE PUBLICATION syncpipe FOR TABLE other`)
	admin := pgtest.Connect(t, okDB)
	for _, q := range []string{`DROP ROLE IF EXISTS validate_norepl`, `CREATE ROLE validate_norepl LOGIN`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS validate_norepl`) })
	asRole := mustParseURL(t, okDB)
	asRole.User = url.User("validate_norepl")
	tls := mustParseURL(t, okDB)
	q := tls.Query()
	q.Set("sslmode", "require")
	tls.RawQuery = q.Encode()
	port99999 := mustParseURL(t, okDB)
	port99999.Host = "127.0.0.1:99999"
	cases := []validateCase{
		{name: "ok", uri: okDB},
		{name: "no primary key", uri: noPK},
		{name: "publication lacks a rules table", uri: unpublished},
		{name: "role without REPLICATION, not owning the tables", uri: asRole.String()},
		{name: "sslmode=require, server without TLS", uri: tls.String()},
		{name: "port 99999", uri: port99999.String()},
		{name: "bare postgres://", uri: "postgres://"},
		{name: "host not found", uri: "postgres://u@nohost.invalid:5432/app?sslmode=disable"},
		{name: "connection refused", uri: "postgres://u@" + harness.FreeAddr(t) + "/app?sslmode=disable"},
	}
	replicaCases := []validateCase{
		{name: "wrong password"},
		{name: "wal_level = replica"},
	}
	replicaURIs := func(r *replicaServer) []string {
		return []string{r.uri("replica_source", "wrong"), r.uri("replica_source", replicaPassword)}
	}
	started := sync.OnceValue(func() *replicaServer { return <-replica })
	got := make([]string, len(cases)+len(replicaCases))
	t.Run("cases", func(t *testing.T) {
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				got[i] = runValidateChild(ctx, t, c)
			})
		}
		for i, c := range replicaCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				r := started()
				if r == nil {
					t.Fatal("no replica server")
				}
				c.uri = replicaURIs(r)[i]
				got[len(cases)+i] = runValidateChild(ctx, t, c)
			})
		}
	})
	if t.Failed() {
		return
	}
	checkGolden(t, filepath.Join("testdata", "validate_source.golden"), strings.Join(got, "\n"))
}

// newValidateDB is a source database with the statements run in it.
func newValidateDB(t *testing.T, sql ...string) string {
	t.Helper()
	uri := pgtest.NewDB(t)
	conn := pgtest.Connect(t, uri)
	for _, q := range sql {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return uri
}

func mustParseURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// validateRules name the table items, which the cases' sources have.
const validateRules = `bucket_definitions:
  global:
    data:
      - SELECT id, name FROM items
`

// runValidateChild runs `syncpipe validate` on a config with the case's
// source URI, in a directory of its own, and returns the exit code and
// output with ports and database names normalised.
func runValidateChild(ctx context.Context, t *testing.T, c validateCase) string {
	dir := t.TempDir()
	cfg := fmt.Sprintf(`source: {uri: %q}
storage: {uri: "postgres://u@127.0.0.1:1/storage?sslmode=disable"}
sync_rules: {path: rules.yaml}
api: {auth: {audience: [syncpipe], hs256_secrets: [a-long-enough-secret-for-the-test-0123]}}
`, c.uri)
	for name, text := range map[string]string{"validate.yaml": cfg, "rules.yaml": validateRules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := harness.RunWith(t, ctx, harness.ProcConfig{
		Args: []string{"validate", "--config", "validate.yaml"}, Env: []string{"PGHOST="}, Dir: dir})
	return fmt.Sprintf("== %s: exit %d\n-- stdout\n%s-- stderr\n%s", c.name, code, normaliseValidate(stdout), normaliseValidate(stderr))
}

var (
	portRE = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	dbRE   = regexp.MustCompile(`\bt\d+_testvalidateagainstsource\b`)
)

// normaliseValidate replaces what differs between runs: ports and the
// test databases' names.
func normaliseValidate(s string) string {
	return dbRE.ReplaceAllString(portRE.ReplaceAllString(s, "127.0.0.1:PORT"), "DB")
}
