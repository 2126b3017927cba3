package badinput

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/cli"
	"github.com/syncpipe/syncpipe/internal/testkit/harness"
	"github.com/syncpipe/syncpipe/internal/testkit/pgtest"
	"github.com/syncpipe/syncpipe/syncapi"
)

// fixture links a file of testdata/badinput from the README.
func fixture(name string) string {
	return fmt.Sprintf("[`%s`](cli/testdata/badinput/%s)", name, name)
}

// apiHeaderTimeout is how long the sync API waits for a request's
// headers (cli/api.go's apiHeaderTimeout).
const apiHeaderTimeout = 10 * time.Second

// Codes of the rows where the process goes on.
const (
	codeFatal     = "keeps running; stored for `status` and `/healthz` (200 degraded), rechecked every 30 s"
	codeRetrying  = "keeps running, retrying with backoff"
	codeReplaced  = "keeps running; a new group re-snapshots while the old one serves"
	codeTableAway = "keeps running; the group's stream waits, stored for `status` and `/healthz` (200 degraded), rechecked after 2 s, backing off to every 30 s"
	codeTextValue = "keeps running"
	// codeSourceDown: a source down when `run` starts (issue 40).
	codeSourceDown = "keeps running: the API serves what storage holds; stored for `status` and `/healthz` (200 degraded); replication starts once the source answers, retried with backoff"
)

func badRows() []badRow {
	cfg := badGroups[0]
	src := badGroups[1]
	sto := badGroups[2]
	api := badGroups[3]
	return []badRow{
		// Configuration and sync rules: `syncpipe validate`, exit 2 with
		// file:line:col and the key path (a YAML syntax error: where the
		// fix belongs); what the source lacks are warnings (exit 0).
		{cfg, "malformed YAML (" + fixture("malformed.yaml") + ")", configRow("malformed.yaml", cli.ExitUsage,
			`^malformed\.yaml:3:10: YAML syntax error: \S.*`)},
		{cfg, "unknown key (" + fixture("unknown_key.yaml") + ")", configRow("unknown_key.yaml", cli.ExitUsage,
			`^unknown_key\.yaml:5:3: api\.listn: unknown key \(did you mean "listen"\?\)$`)},
		{cfg, "wrong type (" + fixture("wrong_type.yaml") + ")", configRow("wrong_type.yaml", cli.ExitUsage,
			`^wrong_type\.yaml:5:3: replication\.workers_per_process: expected an integer, got "two"$`)},
		{cfg, "HS256 secret shorter than 32 bytes (" + fixture("short_secret.yaml") + ")", configRow("short_secret.yaml", cli.ExitUsage,
			`^short_secret\.yaml:4:\d+: api\.auth\.hs256_secrets\[0\]: must be at least 32 bytes \(got 6\)`)},
		{cfg, "invalid SQL in the sync rules (" + fixture("bad_sql_rules.yaml") + ")", configRow("bad_sql.yaml", cli.ExitUsage,
			`^bad_sql_rules\.yaml:4:\d+: bucket "global" data\[0\]: \S.*`)},
		{cfg, "unknown function in the sync rules (" + fixture("unknown_function.yaml") + ")", configRow("unknown_function.yaml", cli.ExitUsage,
			`^unknown_function\.yaml:8:\d+: bucket "global" data\[0\]: unknown function "frobnicate"`)},
		{cfg, "sync rules naming a table the source lacks (" + fixture("missing_table.yaml") + ")", configRow("missing_table.yaml", cli.ExitOK,
			`^missing_table\.yaml:9:\d+: .*orders`)},
		{cfg, "sync rules naming a column the table lacks (" + fixture("missing_column.yaml") + ")", configRow("missing_column.yaml", cli.ExitOK,
			`^missing_column\.yaml:8:\d+: .*colour`)},
		{cfg, "pipelines only to other sinks, no storage section and no `state_dir` (" + fixture("no_state_dir.yaml") + ")", configRow("no_state_dir.yaml", cli.ExitUsage,
			`^no_state_dir\.yaml: state_dir: required: the directory of the pipelines' state files`)},
		{cfg, "a storage section and `state_dir` (" + fixture("storage_and_state_dir.yaml") + ")", configRow("storage_and_state_dir.yaml", cli.ExitUsage,
			`^storage_and_state_dir\.yaml:3:1: state_dir: set either a storage section or state_dir, not both`)},

		// The source.
		{src, "a rules table without primary key or replica identity (`CREATE TABLE items (id text, name text)`)", startRow(
			`^syncpipe run: group 1: table public\.items has no primary key or replica identity index: add one .*REPLICA IDENTITY`,
			`CREATE TABLE items (id text, name text)`, `INSERT INTO items VALUES ('a', 'first')`)},
		{src, "sync rules naming a table the source lacks, at `run`", startRow(
			`^syncpipe run: group 1: table public\.items from the sync rules does not exist in the source database \(check the name and schema\)`)},
		{src, "a column of a type without a JSON mapping (`point`, `int4range`)", textTypeRow},
		{src, "`wal_level = replica` on the source", walLevelRow},
		{src, "publication missing, and the source role may not create it (it does not own the tables)", publicationPrivilegeRow},
		{src, "publication dropped while running (`DROP PUBLICATION syncpipe`)", publicationRow},
		{src, "a rules table renamed, moved to another schema or dropped while running (`ALTER TABLE items RENAME TO items_old`)", tableAwayRow},
		{src, "replication slot dropped while running (`pg_drop_replication_slot`)", slotDroppedRow},
		{src, "replication slot lost while running (invalidated: `max_slot_wal_keep_size = 1MB` on the source)", slotLostRow},
		{src, "wrong source password", sourcePasswordRow},
		{src, "source unreachable at start", sourceUnreachableAtStartRow},
		{src, "source unreachable while running", sourceCutRow},

		// The storage.
		{sto, "wrong storage password", storagePasswordRow},
		{sto, "storage unreachable at start", storageUnreachableAtStartRow},
		{sto, "storage unreachable while running", storageCutRow},
		{sto, "storage read-only (`default_transaction_read_only = on`)", storageReadOnlyRow},

		// The sync API.
		{api, "API port in use", portInUseRow},
		{api, "JWT with `alg: none`", tokenRow(func(t *testing.T) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodNone, goodClaims()).SignedString(jwt.UnsafeAllowNoneSignatureType)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, http.StatusUnauthorized, `^PSYNC_S2101 invalid token: .*signing method none is invalid$`)},
		{api, "JWT with a wrong signature", tokenRow(func(t *testing.T) string {
			return signHS(t, goodClaims(), "another-secret-of-the-same-length-as-the-right-one")
		}, http.StatusUnauthorized, `^PSYNC_S2101 invalid token: .*signature is invalid$`)},
		{api, "JWT with an `RS256` header, signed with the HS256 secret (alg confusion)", tokenRow(algConfusion,
			http.StatusUnauthorized, `^PSYNC_S2101 no matching key: .*no kid-less key allows RS256$`)},
		{api, "JWT with a `kid` no key has, signed with the HS256 secret", tokenRow(func(t *testing.T) string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, goodClaims())
			tok.Header["kid"] = "unknown-key"
			s, err := tok.SignedString([]byte(harness.Secret))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, http.StatusUnauthorized, `^PSYNC_S2101 no matching key: no key has the token's kid "unknown-key"`)},
		{api, "expired JWT", claimsRow(func(c jwt.MapClaims) {
			c["iat"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
		}, `^PSYNC_S2103 token expired at <time>$`)},
		{api, "JWT not yet valid (`nbf` in an hour)", claimsRow(func(c jwt.MapClaims) {
			c["nbf"] = time.Now().Add(time.Hour).Unix()
		}, `^PSYNC_S2101 .*not valid before <time>`)},
		{api, "JWT for another audience", claimsRow(func(c jwt.MapClaims) { c["aud"] = "another-app" },
			`^PSYNC_S2105 .*another-app.*syncpipe`)},
		{api, "JWT without `sub`", claimsRow(func(c jwt.MapClaims) { delete(c, "sub") }, `^PSYNC_S2101 token has no sub claim`)},
		{api, "JWT lifetime over `api.auth.max_lifetime` (48 h)", claimsRow(func(c jwt.MapClaims) {
			c["exp"] = time.Now().Add(48 * time.Hour).Unix()
		}, `^PSYNC_S2102 .*max_lifetime`)},
		{api, "oversized JWT (100 KiB)", tokenRow(func(t *testing.T) string {
			c := goodClaims()
			c["padding"] = strings.Repeat("x", 100<<10)
			return signHS(t, c, harness.Secret)
		}, http.StatusRequestHeaderFieldsTooLarge, `^PSYNC_S2001 the request.s headers are \d+ bytes, over the limit of 64 KiB`)},
		{api, "malformed request body (`{\"buckets\": [`)", bodyRow(`{"buckets": [`, http.StatusBadRequest,
			`^PSYNC_S2001 invalid sync request: the body is not valid JSON`)},
		{api, "oversized request body (2 MiB)", bodyRow(`{"client_id": "`+strings.Repeat("x", 2<<20)+`"}`,
			http.StatusRequestEntityTooLarge, `max_request_bytes`)},
		{api, "100 000 bucket entries in the request", bodyRow(manyBuckets(100000), http.StatusRequestEntityTooLarge, `max_request_bytes`)},
		{api, "unknown bucket names in the request", unknownBucketRow},
		{api, "negative `after`", bodyRow(`{"buckets": [{"name": "global[]", "after": "-1"}]}`, http.StatusBadRequest,
			`^PSYNC_S2001 invalid sync request: buckets\[0\]: after of bucket "global\[\]" must be a decimal string op id, got "-1"$`)},
		{api, "`after` beyond 64 bits", bodyRow(`{"buckets": [{"name": "global[]", "after": "99999999999999999999"}]}`, http.StatusBadRequest,
			`^PSYNC_S2001 invalid sync request: buckets\[0\]: after of bucket "global\[\]" must be a decimal string op id`)},
		{api, "more streams than `api.max_concurrent_connections` (1)", tooManyStreamsRow},
		{api, "headers sent a byte a second", slowHeadersRow},
		{api, "body sent a byte a second", slowBodyRow},
	}
}

// configRow runs `syncpipe validate` on a fixture: the exit code and the
// first line (for cli.ExitOK: the first warning) must match.
func configRow(file string, code int, pattern string) func(*testing.T, *badHarness) badCheck {
	re := regexp.MustCompile(pattern)
	return func(t *testing.T, h *badHarness) badCheck {
		p := h.startValidate(t, file)
		return func(t *testing.T) (string, string) { return validateCheck(t, p, code, re) }
	}
}

func validateCheck(t *testing.T, p *badProc, code int, re *regexp.Regexp) (string, string) {
	t.Helper()
	got, stderr := p.wait(t, time.Minute)
	if got != code {
		t.Fatalf("exit %d, want %d; stderr:\n%s", got, code, stderr)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !strings.HasSuffix(l, "problem(s) found") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 || !re.MatchString(lines[0]) {
		t.Fatalf("stderr does not start with a line matching %s:\n%s", re, stderr)
	}
	return strings.Join(lines, "\n"), fmt.Sprintf("exit %d", code)
}

// waitFatal waits for a stored error matching re: logged, the reason
// /healthz gives, and in the ERRORS of `syncpipe status`.
func waitFatal(t *testing.T, h *badHarness, p *badProc, re *regexp.Regexp) string {
	t.Helper()
	rec := p.waitLog(t, time.Minute, "a stored error matching "+re.String(), func(r logRec) bool {
		return r.str("msg") == "replication needs attention" && re.MatchString(r.str("err"))
	})
	addr := p.apiAddr(t)
	_, body := waitHealth(t, p, addr, 30*time.Second, "degraded", func(code int, body string) bool {
		return code == http.StatusOK && strings.Contains(body, `"status":"degraded"`)
	})
	if reason := healthReason(t, body); !re.MatchString(reason) {
		t.Fatalf("/healthz reason %q does not match %s", reason, re)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out, _ := harness.RunWith(t, ctx, harness.ProcConfig{Args: []string{"status", "--config", "run.yaml"}, Env: p.env, Dir: h.dir})
	_, errs, _ := strings.Cut(out, "\nERRORS\n")
	if code != cli.ExitOK || !re.MatchString(strings.Join(strings.Fields(errs), " ")) {
		t.Fatalf("syncpipe status: exit %d, its ERRORS do not match %s:\n%s", code, re, out)
	}
	return rec.said()
}

// startRow starts `syncpipe run` on a source made by sql; it must exit 1
// with a last line matching pattern.
func startRow(pattern string, sql ...string) func(*testing.T, *badHarness) badCheck {
	re := regexp.MustCompile(pattern)
	return func(t *testing.T, h *badHarness) badCheck {
		source, _ := h.badSource(t, sql...)
		p := h.startRun(t, source, h.storage, h.schema())
		return func(t *testing.T) (string, string) { return exitRow(t, p, re) }
	}
}

var publicationRow = func(t *testing.T, h *badHarness) badCheck {
	source, conn := h.badSource(t, itemsSQL...)
	p := h.startRun(t, source, h.storage, h.schema())
	return func(t *testing.T) (string, string) {
		streaming(t, p)
		if _, err := conn.Exec(context.Background(), `DROP PUBLICATION syncpipe`); err != nil {
			t.Fatal(err)
		}
		return waitFatal(t, h, p, regexp.MustCompile(`publication syncpipe does not exist.*CREATE PUBLICATION syncpipe FOR TABLE`)), codeFatal
	}
}

// tableAwayRow renames the rules table away under a running `syncpipe
// run`: the stored error names it and says how to bring it back.
func tableAwayRow(t *testing.T, h *badHarness) badCheck {
	source, conn := h.badSource(t, itemsSQL...)
	p := h.startRun(t, source, h.storage, h.schema())
	return func(t *testing.T) (string, string) {
		streaming(t, p)
		if _, err := conn.Exec(context.Background(), `ALTER TABLE items RENAME TO items_old`); err != nil {
			t.Fatal(err)
		}
		return waitFatal(t, h, p, regexp.MustCompile(`table public\.items from the sync rules does not exist.*RENAME TO / SET SCHEMA it back`)), codeTableAway
	}
}

// publicationPrivilegeRow runs `syncpipe run` as a role that may read
// items and replicate, but does not own items, so it may not create the
// publication syncpipe would create.
func publicationPrivilegeRow(t *testing.T, h *badHarness) badCheck {
	source, conn := h.badSource(t, itemsSQL...)
	role := fmt.Sprintf("badinput_reader_%d", os.Getpid())
	ctx := context.Background()
	for _, q := range []string{"CREATE ROLE " + role + " LOGIN REPLICATION", "GRANT SELECT ON items TO " + role} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { // before the database is dropped: the role's grant is in it
		c, err := pgx.Connect(ctx, source)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = c.Exec(ctx, "DROP ROLE "+role)
	})
	u, err := url.Parse(source)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	p := h.startRun(t, u.String(), h.storage, h.schema())
	return func(t *testing.T) (string, string) {
		return exitRow(t, p, regexp.MustCompile(`^syncpipe run: group 1: publication syncpipe does not exist and this role may not create it \(.*\): `+
			`run CREATE PUBLICATION syncpipe FOR TABLE public\.items as the owner of the tables`))
	}
}

func textTypeRow(t *testing.T, h *badHarness) badCheck {
	source, _ := h.badSource(t, `CREATE TABLE items (id text PRIMARY KEY, spot point, span int4range)`,
		`INSERT INTO items VALUES ('a', '(1,2)', '[1,5)')`)
	p := h.startRun(t, source, h.storage, h.schema())
	return func(t *testing.T) (string, string) {
		addr := streaming(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel() // ends the stream: a row not there by then fails below
		s := harness.OpenStream(t, ctx, addr, signHS(t, goodClaims(), harness.Secret), `{"raw_data": true}`)
		for l := range s.Lines {
			var m struct {
				Data struct {
					Data []struct {
						Op       string `json:"op"`
						Type     string `json:"object_type"`
						ObjectID string `json:"object_id"`
						Data     string `json:"data"`
					} `json:"data"`
				} `json:"data"`
			}
			if json.Unmarshal([]byte(l), &m) != nil {
				continue
			}
			for _, op := range m.Data.Data {
				if op.ObjectID != "a" {
					continue
				}
				if !strings.Contains(op.Data, `"spot":"(1,2)"`) || !strings.Contains(op.Data, `"span":"[1,5)"`) {
					t.Fatalf("the row synced as %s, want its columns as their text form", op.Data)
				}
				return fmt.Sprintf("nothing: the columns sync as their PostgreSQL text form (%s %s/%s: %s)", op.Op, op.Type, op.ObjectID, op.Data),
					codeTextValue
			}
		}
		t.Fatalf("the stream ended without the row (%v)", ctx.Err())
		return "", ""
	}
}

// replicaRow starts `syncpipe run` on databases of the second server (as
// dbs says) once that is up (its check waits for it: the server was
// started in the background); the process must exit 1 with a last line
// matching pattern.
func replicaRow(pattern string, dbs func(h *badHarness, r *replicaServer) (source, storage string, env []string)) func(*testing.T, *badHarness) badCheck {
	re := regexp.MustCompile(pattern)
	return func(_ *testing.T, h *badHarness) badCheck {
		return func(t *testing.T) (string, string) {
			r, err := h.replica()
			if err != nil {
				t.Fatalf("second PostgreSQL server: %v", err)
			}
			source, storage, env := dbs(h, r)
			return exitRow(t, h.startRun(t, source, storage, env...), re)
		}
	}
}

var walLevelRow = replicaRow(`^syncpipe run: group 1: the source database has wal_level = replica .*set wal_level = logical`,
	func(h *badHarness, r *replicaServer) (string, string, []string) {
		return r.uri("replica_source", replicaPassword), h.storage, []string{h.schema()}
	})

var sourcePasswordRow = replicaRow(`^syncpipe run: group 1: connect to the source: .*password authentication failed for user "badinput".*: the server refused these credentials: check the user and password in source\.uri`,
	func(h *badHarness, r *replicaServer) (string, string, []string) {
		return r.uri("replica_source", "wrong"), h.storage, []string{h.schema()}
	})

var storagePasswordRow = replicaRow(`^syncpipe run: storage at \S+ refused the connection: .*password authentication failed for user "badinput".*: the server refused these credentials: check the user and password in storage\.uri`,
	func(h *badHarness, r *replicaServer) (string, string, []string) {
		return h.source, r.uri("replica_source", "wrong"), h.shared()
	})

func slotDroppedRow(t *testing.T, h *badHarness) badCheck {
	source, conn := h.badSource(t, itemsSQL...)
	p := h.startRun(t, source, h.storage, h.schema())
	return func(t *testing.T) (string, string) {
		streaming(t, p)
		slot := p.waitLog(t, time.Minute, "the slot's name", func(r logRec) bool { return r.str("msg") == "created replication slot" }).str("slot")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		harness.DropSlot(ctx, t, conn, slot)
		rec := p.waitLog(t, time.Minute, "the lost changes", logMatch("ERROR", regexp.MustCompile(`^ERROR changes lost to the stream: .*`+slot)))
		p.waitLog(t, time.Minute, "a replacement group", func(r logRec) bool { return r.str("msg") == "replacement group created" })
		return rec.said(), codeReplaced
	}
}

// slotLostRow runs `syncpipe run` on the third server (once that is up:
// it was started in the background), whose slots are invalidated 1 MB
// behind: once it streams, WAL is written (a segment switch and a
// checkpoint at a time) until the server invalidates the slot.
func slotLostRow(_ *testing.T, h *badHarness) badCheck {
	return func(t *testing.T) (string, string) {
		c, err := h.lossy()
		if err != nil {
			t.Fatalf("third PostgreSQL server: %v", err)
		}
		source := c.URI("lossy_source")
		p := h.startRun(t, source, h.storage, h.schema())
		streaming(t, p)
		conn := pgtest.Connect(t, source)
		lost := logMatch("ERROR", regexp.MustCompile(`^ERROR changes lost to the stream: .*was invalidated \(wal_status=lost`))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var rec logRec
		round := 0
		harness.Poll(t, ctx, p.Proc, "the slot to be lost while WAL is written", func() bool {
			for _, q := range []string{fmt.Sprintf(`INSERT INTO items VALUES ('lost%d', 'x')`, round), `SELECT pg_switch_wal()`, `CHECKPOINT`} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			round++
			var ok bool
			rec, ok = p.find(lost)
			return ok
		})
		p.waitLog(t, time.Minute, "a replacement group", func(r logRec) bool { return r.str("msg") == "replacement group created" })
		return rec.said(), codeReplaced
	}
}

// retryRow waits for a retried error matching re.
func retryRow(t *testing.T, p *badProc, re *regexp.Regexp) string {
	t.Helper()
	rec := p.waitLog(t, time.Minute, "a retried error matching "+re.String(), func(r logRec) bool {
		return r.str("msg") == "retrying after error" && re.MatchString(r.str("err"))
	})
	p.running(t)
	return rec.said()
}

func sourceUnreachableAtStartRow(t *testing.T, h *badHarness) badCheck {
	p := h.startRun(t, "postgres://postgres@"+harness.FreeAddr(t)+"/app?sslmode=disable", h.storage, h.schema())
	return func(t *testing.T) (string, string) {
		return waitFatal(t, h, p, regexp.MustCompile(`source unreachable: connect to the source: .*connection refused`)), codeSourceDown
	}
}

func sourceCutRow(t *testing.T, h *badHarness) badCheck {
	proxy := newCutProxy(t, hostOf(t, h.source))
	p := h.startRun(t, proxy.via(t, h.source), h.storage, h.shared()...)
	return func(t *testing.T) (string, string) {
		streaming(t, p)
		proxy.cutOff()
		return retryRow(t, p, regexp.MustCompile(`connection refused`)), codeRetrying
	}
}

// exitRow waits for the process to exit 1 and returns what it said as it
// did: from the line "syncpipe run: …" on.
func exitRow(t *testing.T, p *badProc, re *regexp.Regexp) (string, string) {
	t.Helper()
	code, stderr := p.wait(t, time.Minute)
	_, said, _ := strings.Cut("\n"+stderr, "\nsyncpipe run: ")
	said = "syncpipe run: " + strings.TrimSpace(said)
	if code != cli.ExitFailure || !re.MatchString(said) {
		t.Fatalf("exit %d; want exit %d and a message matching %s; stderr:\n%s", code, cli.ExitFailure, re, stderr[max(0, len(stderr)-4<<10):])
	}
	return said, fmt.Sprintf("exit %d", code)
}

func storageUnreachableAtStartRow(t *testing.T, h *badHarness) badCheck {
	p := h.startRun(t, h.source, "postgres://postgres@"+harness.FreeAddr(t)+"/storage?sslmode=disable", h.shared()...)
	return func(t *testing.T) (string, string) {
		return exitRow(t, p, regexp.MustCompile(`^syncpipe run: .*storage unreachable.*connection refused`))
	}
}

func storageCutRow(t *testing.T, h *badHarness) badCheck {
	proxy := newCutProxy(t, hostOf(t, h.storage))
	p := h.startRun(t, h.source, proxy.via(t, h.storage), h.shared()...)
	return func(t *testing.T) (string, string) {
		addr := streaming(t, p)
		proxy.cutOff()
		_, body := waitHealth(t, p, addr, 30*time.Second, "503 with connection refused", func(code int, body string) bool {
			return code == http.StatusServiceUnavailable && strings.Contains(body, "connection refused")
		})
		return "/healthz: " + body, "keeps running, retrying; `/healthz` 503 unavailable"
	}
}

func storageReadOnlyRow(t *testing.T, h *badHarness) badCheck {
	source, storage, conn := h.badDBs(t, itemsSQL...)
	p := h.startRun(t, source, storage)
	return func(t *testing.T) (string, string) {
		streaming(t, p)
		ctx := context.Background()
		st := pgtest.Connect(t, storage)
		var db string
		if err := st.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " SET default_transaction_read_only = on",
			// New sessions are read-only; the process's open ones end —
			// except its lease session: a lease names its holder's session
			// and is free once that session is gone (leases.go), so ending
			// it made the stream lose its lease first, and which of the
			// two errors the process said first depended on timing.
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
				AND pid NOT IN (SELECT pid FROM syncpipe.leases WHERE pid IS NOT NULL)`,
		} {
			if _, err := st.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if _, err := conn.Exec(ctx, `INSERT INTO items VALUES ('c', 'third')`); err != nil {
			t.Fatal(err)
		}
		return retryRow(t, p, regexp.MustCompile(`read-only transaction`)), codeRetrying
	}
}

func portInUseRow(t *testing.T, h *badHarness) badCheck {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := h.startRun(t, h.source, h.storage, append(h.shared(), "BADINPUT_LISTEN="+ln.Addr().String())...)
	return func(t *testing.T) (string, string) {
		return exitRow(t, p, regexp.MustCompile(`^syncpipe run: listen for the sync API on 127\.0\.0\.1:\d+: .*address already in use`))
	}
}

// badAPI is a running `syncpipe run` whose sync API the rows call.
type badAPI struct {
	p    *badProc
	addr chan string // receives the address once the API serves a checkpoint ("" if it never does)
	mu   sync.Mutex  // guards got: parallel subtests ask for the address at once
	got  string
}

// startAPI starts a process over the items source; maxStreams, if set,
// is its api.max_concurrent_connections.
func (h *badHarness) startAPI(t *testing.T, maxStreams string) *badAPI {
	env := h.shared()
	if maxStreams != "" {
		env = append(env, "BADINPUT_MAX_STREAMS="+maxStreams)
	}
	a := &badAPI{p: h.startRun(t, h.source, h.storage, env...), addr: make(chan string, 1)}
	go func() { a.addr <- a.serving() }()
	return a
}

// serving waits (without a test: from a goroutine) for the API to listen
// and for a checkpoint, and returns its address.
func (a *badAPI) serving() string {
	deadline := time.After(2 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var addr string
	for {
		a.p.mu.Lock()
		var streamingNow bool
		for _, r := range a.p.recs {
			switch r.str("msg") {
			case "sync API listening":
				addr = r.str("addr")
			case "streaming from the replication slot":
				streamingNow = true
			}
		}
		a.p.mu.Unlock()
		if addr != "" && streamingNow {
			if code, body := harness.Get(context.Background(), addr, "/healthz", ""); code == http.StatusOK && strings.Contains(body, `"status":"ok"`) {
				return addr
			}
		}
		select {
		case <-a.p.Exited():
			return ""
		case <-deadline:
			return ""
		case <-tick.C:
		}
	}
}

// ready returns the API's address once it serves.
func (a *badAPI) ready(t *testing.T) string {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.got == "" {
		a.got = <-a.addr
		a.addr <- a.got // for slowClient
		if a.got == "" {
			t.Fatalf("the sync API never served; stderr:\n%s", a.p.Tail(4<<10))
		}
	}
	return a.got
}

// goodClaims are a valid token's claims.
func goodClaims() jwt.MapClaims {
	n := time.Now()
	return jwt.MapClaims{"sub": "user-1", "iat": n.Unix(), "exp": n.Add(time.Hour).Unix(), "aud": "syncpipe"}
}

func signHS(t *testing.T, c jwt.MapClaims, secret string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// algConfusion is a token whose header says RS256 but whose signature is
// an HMAC with the HS256 secret: a server that picked the verification
// method from the header and used the secret as the key would accept it.
func algConfusion(t *testing.T) string {
	enc := base64.RawURLEncoding
	head, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	body, _ := json.Marshal(goodClaims())
	in := enc.EncodeToString(head) + "." + enc.EncodeToString(body)
	mac := hmac.New(sha256.New, []byte(harness.Secret))
	mac.Write([]byte(in))
	return in + "." + enc.EncodeToString(mac.Sum(nil))
}

// apiSaid renders an API error body: code and message.
func apiSaid(body string) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) == nil && e.Error.Code != "" {
		return e.Error.Code + " " + e.Error.Message
	}
	return strings.TrimSpace(body)
}

// syncPost sends POST /sync/stream on a connection of its own, writing
// while it reads (the server may answer before it has read all), and
// returns the response and its body (not read for 200: a stream).
func syncPost(t *testing.T, addr, auth, body string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := fmt.Sprintf("POST /sync/stream HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nConnection: close\r\n\r\n%s", addr, auth, len(body), body)
	go func() { _, _ = io.WriteString(c, req) }()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// requestRow sends a request to the shared API and expects status and a
// message matching pattern (after normalisation).
func requestRow(auth func(t *testing.T) string, body string, status int, pattern string) func(*testing.T, *badHarness) badCheck {
	re := regexp.MustCompile(pattern)
	return now(func(t *testing.T, h *badHarness) (string, string) {
		addr := h.api.ready(t)
		resp, b := syncPost(t, addr, auth(t), body)
		said := apiSaid(b)
		if resp.StatusCode != status || !re.MatchString(normaliseSaid(said)) {
			t.Fatalf("HTTP %d %q, want %d with a message matching %s", resp.StatusCode, said, status, re)
		}
		return said, fmt.Sprintf("HTTP %d", status)
	})
}

func tokenRow(token func(t *testing.T) string, status int, pattern string) func(*testing.T, *badHarness) badCheck {
	return requestRow(func(t *testing.T) string { return "Token " + token(t) }, `{"raw_data": true}`, status, pattern)
}

func claimsRow(edit func(jwt.MapClaims), pattern string) func(*testing.T, *badHarness) badCheck {
	return tokenRow(func(t *testing.T) string {
		c := goodClaims()
		edit(c)
		return signHS(t, c, harness.Secret)
	}, http.StatusUnauthorized, pattern)
}

func bodyRow(body string, status int, pattern string) func(*testing.T, *badHarness) badCheck {
	return requestRow(func(t *testing.T) string { return "Token " + signHS(t, goodClaims(), harness.Secret) }, body, status, pattern)
}

// manyBuckets is a request body listing n buckets.
func manyBuckets(n int) string {
	var b strings.Builder
	b.WriteString(`{"buckets":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"b%d[]","after":"1"}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// openStream opens POST /sync/stream with body, authenticated with a
// valid token; it ends with the test.
func openStream(t *testing.T, addr, body string) *harness.RawStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return harness.OpenStream(t, ctx, addr, signHS(t, goodClaims(), harness.Secret), body)
}

// firstCheckpoint reads the stream's first checkpoint line and returns the
// buckets it lists, failing after 30 s.
func firstCheckpoint(t *testing.T, s *harness.RawStream) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.Lines:
			if !ok {
				t.Fatal("the stream ended before its first checkpoint")
			}
			var m struct {
				Checkpoint *struct {
					Buckets []struct {
						Bucket string `json:"bucket"`
					} `json:"buckets"`
				} `json:"checkpoint"`
			}
			if json.Unmarshal([]byte(l), &m) != nil || m.Checkpoint == nil {
				continue
			}
			var names []string
			for _, b := range m.Checkpoint.Buckets {
				names = append(names, b.Bucket)
			}
			return names
		case <-timeout:
			t.Fatal("no checkpoint within 30 s")
		}
	}
}

var unknownBucketRow = now(func(t *testing.T, h *badHarness) (string, string) {
	addr := h.api.ready(t)
	s := openStream(t, addr,
		`{"raw_data": true, "buckets": [{"name": "nosuch[]", "after": "5"}, {"name": "global[]", "after": "0"}]}`)
	names := firstCheckpoint(t, s)
	if len(names) != 1 || !strings.HasSuffix(names[0], "global[]") {
		t.Fatalf("the first checkpoint lists %v, want global[] alone", names)
	}
	return fmt.Sprintf("nothing: the checkpoint lists only the user's buckets %v, without nosuch[], which the client then deletes", names),
		"HTTP 200"
})

func tooManyStreamsRow(t *testing.T, h *badHarness) badCheck {
	a := h.startAPI(t, "1")
	return func(t *testing.T) (string, string) {
		addr := a.ready(t)
		auth := "Token " + signHS(t, goodClaims(), harness.Secret)
		s := openStream(t, addr, `{"raw_data": true}`)
		firstCheckpoint(t, s)
		resp, body := syncPost(t, addr, auth, `{"raw_data": true}`)
		said := apiSaid(body)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "5" ||
			!strings.Contains(said, "api.max_concurrent_connections") {
			t.Fatalf("HTTP %d, Retry-After %q: %s; want 429, Retry-After: 5 and the setting named", resp.StatusCode, resp.Header.Get("Retry-After"), said)
		}
		for range 5 {
			if code, _ := harness.Get(context.Background(), addr, "/healthz", ""); code != http.StatusOK {
				t.Fatalf("/healthz answered %d while streams were refused", code)
			}
		}
		return said, "HTTP 429, `Retry-After: 5`; `/healthz` still 200"
	}
}

// slowResult is what a slow client saw: the server's first line (empty if
// it closed without answering) and when the connection was closed.
type slowResult struct {
	status, body string
	took         time.Duration
	err          error
}

// slowClient waits for the API, sends head and then a byte a second until
// the server closes the connection.
func slowClient(a *badAPI, head func(addr string) string) <-chan slowResult {
	out := make(chan slowResult, 1)
	go func() {
		addr := <-a.addr
		a.addr <- addr
		if addr == "" {
			out <- slowResult{err: fmt.Errorf("the API never served")}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			out <- slowResult{err: err}
			return
		}
		defer c.Close()
		start := time.Now()
		if _, err := io.WriteString(c, head(addr)); err != nil {
			out <- slowResult{err: err}
			return
		}
		done := make(chan struct{})
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(40 * time.Second))
		b, err := io.ReadAll(c)
		close(done)
		if len(b) > 0 || errors.Is(err, syscall.ECONNRESET) {
			// A server closing a connection it has not read all of resets
			// it: the client was still sending.
			err = nil
		}
		status, rest, _ := strings.Cut(string(b), "\r\n")
		_, body, _ := strings.Cut(rest, "\r\n\r\n")
		out <- slowResult{status: status, body: body, took: time.Since(start), err: err}
	}()
	return out
}

// slowCheck expects the connection closed after about limit.
func slowCheck(res <-chan slowResult, limit time.Duration, check func(t *testing.T, r slowResult) (string, string)) badCheck {
	return func(t *testing.T) (string, string) {
		r := <-res
		if r.err != nil {
			t.Fatalf("slow client: %v (after %s)", r.err, r.took)
		}
		// The margins: 1 s early (the client's clock starts after its
		// dial), 5 s late (a -race server on 2 busy cores closing the
		// connection late); the rows ran at 10.0 s here in parallel.
		if r.took < limit-time.Second || r.took > limit+5*time.Second {
			t.Fatalf("the server closed the connection after %s (%q), want about %s", r.took, r.status, limit)
		}
		return check(t, r)
	}
}

func slowHeadersRow(t *testing.T, h *badHarness) badCheck {
	res := slowClient(h.api, func(addr string) string {
		return "POST /sync/stream HTTP/1.1\r\nHost: " + addr + "\r\nX-Slow: "
	})
	return slowCheck(res, apiHeaderTimeout, func(t *testing.T, r slowResult) (string, string) {
		if r.status != "" {
			t.Fatalf("the server answered %q, want the connection closed", r.status)
		}
		return fmt.Sprintf("nothing: the connection is closed after %s (the header timeout)", apiHeaderTimeout), "connection closed"
	})
}

func slowBodyRow(t *testing.T, h *badHarness) badCheck {
	auth := "Token " + signHS(t, goodClaims(), harness.Secret)
	res := slowClient(h.api, func(addr string) string {
		return "POST /sync/stream HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: " + auth +
			"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
	})
	return slowCheck(res, syncapi.BodyReadTimeout, func(t *testing.T, r slowResult) (string, string) {
		if !strings.HasPrefix(r.status, "HTTP/1.1 408") {
			t.Fatalf("the server answered %q, want 408", r.status)
		}
		return apiSaid(r.body), "HTTP 408"
	})
}
