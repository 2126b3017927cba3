package badinput

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncpipe/syncpipe/internal/testkit/harness"
)

// The bad-input catalogue (issue 17): for each way a user can get syncpipe's
// input wrong — its config and sync rules, the source, the storage, a sync
// API client — what syncpipe says and with which exit code or HTTP status.
// Every row drives the real binary (harness.Binary) against the test
// cluster, asserts the code and
// the shape of the message, and records what was said, normalised, in the
// README table between the BAD-INPUT CATALOGUE markers (-update rewrites
// it; without it the test fails when the table is stale).
//
// Rows may start slow work (a process coming up, a connection waiting for
// a server timeout) before any row is checked, so that the waits overlap:
// the rows' checks are parallel subtests, but `go test` runs at most
// -parallel (GOMAXPROCS) of them at a time, and most of a row's time is
// spent waiting.

// badRow is one row of the catalogue.
type badRow struct {
	group string // the table's section
	input string // Markdown: what the user got wrong
	// start begins the row (before any row is checked) and returns its
	// check, which asserts what syncpipe did and returns what it said and
	// its exit code or HTTP status, for the table.
	start func(t *testing.T, h *badHarness) badCheck
}

type badCheck func(t *testing.T) (said, code string)

// now makes a row that has nothing to start.
func now(check func(t *testing.T, h *badHarness) (said, code string)) func(*testing.T, *badHarness) badCheck {
	return func(_ *testing.T, h *badHarness) badCheck {
		return func(t *testing.T) (string, string) { return check(t, h) }
	}
}

// badGroups orders the sections of the table.
var badGroups = []string{"Configuration and sync rules", "Source", "Storage", "Sync API"}

func TestBadInputCatalogue(t *testing.T) {
	t.Parallel()
	start := time.Now()
	h := newBadHarness(t)
	t.Logf("harness started in %s", time.Since(start).Round(100*time.Millisecond))
	rows := badRows()
	checks := make([]badCheck, len(rows))
	for i, r := range rows {
		began := time.Now()
		checks[i] = r.start(t, h)
		if d := time.Since(began); d > 500*time.Millisecond {
			t.Logf("starting %q took %s", badName(r.input), d.Round(10*time.Millisecond))
		}
	}
	t.Logf("rows started in %s", time.Since(start).Round(100*time.Millisecond))
	type result struct{ said, code string }
	results := make([]*result, len(rows))
	// Each row is a parallel subtest: what it started has its own
	// databases (or its own schema, publication and slots on the shared
	// ones), and no row stops or restarts a server another row uses (the
	// cut rows cut a proxy of their own). The group returns once every
	// row is done.
	t.Run("row", func(t *testing.T) {
		for i, r := range rows {
			t.Run(badName(r.input), func(t *testing.T) {
				t.Parallel()
				said, code := checks[i](t)
				results[i] = &result{normaliseSaid(said), code}
			})
		}
	})
	t.Logf("%d rows in %s", len(rows), time.Since(start).Round(100*time.Millisecond))
	var b strings.Builder
	for _, g := range badGroups {
		fmt.Fprintf(&b, "\n**%s**\n\n| Input | syncpipe says | Exit code / HTTP status |\n| --- | --- | --- |\n", g)
		for i, r := range rows {
			if r.group != g {
				continue
			}
			if results[i] == nil {
				return // a failed (or, with -run, skipped) row: the table stays as it is
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.input, mdCode(results[i].said), results[i].code)
		}
	}
	badReadme(t, strings.TrimPrefix(b.String(), "\n"))
}

// badName is a subtest name for an input: its words, without Markdown.
func badName(input string) string {
	s := regexp.MustCompile(`\]\([^)]*\)|[\x60\[\]*]`).ReplaceAllString(input, "")
	if i := strings.Index(s, " ("); i > 0 {
		s = s[:i]
	}
	return s
}

// mdCode renders a message as a Markdown code span inside a table cell.
func mdCode(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}

const (
	badReadmeBegin = "<!-- BEGIN BAD-INPUT CATALOGUE"
	badReadmeEnd   = "<!-- END BAD-INPUT CATALOGUE -->"
)

// badReadme checks (with -update: rewrites) the README's catalogue.
func badReadme(t *testing.T, table string) {
	t.Helper()
	path := filepath.Join(harness.Root(t), "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, badReadmeBegin), strings.Index(s, badReadmeEnd)
	if i < 0 || j < i {
		t.Fatalf("README lacks the %s … %s markers", badReadmeBegin, badReadmeEnd)
	}
	i += strings.Index(s[i:], "\n") + 1
	want := "\n" + table + "\n"
	if s[i:j] == want {
		return
	}
	if !*update {
		t.Fatalf("the README's bad-input catalogue is stale; run: go test ./e2e/badinput -run TestBadInputCatalogue -update\n--- want\n%s--- README has\n%s", want, s[i:j])
	}
	if err := os.WriteFile(path, []byte(s[:i]+want+s[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
}

// saidNormalisers replace what differs between runs: ports, database
// names, role names, times, positions in the WAL, process ids, slot name suffixes,
// the size and the number of the batch a storage write failed on.
var saidNormalisers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b(127\.0\.0\.1|localhost):\d+`), "$1:<port>"},
	{regexp.MustCompile(`\(127\.0\.0\.1\):? `), ""},
	{regexp.MustCompile(`\b(t\d+_[a-z0-9_]+|badinput_\d+_\d+)\b`), "<db>"},
	{regexp.MustCompile(`\bbadinput_reader_\d+\b`), "<role>"}, // a role per test process
	{regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d(:\d\d)?)?`), "<time>"},
	{regexp.MustCompile(`\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b`), "<lsn>"},
	{regexp.MustCompile(`\b(pid|PID)[ =]\d+`), "$1 <pid>"},
	{regexp.MustCompile(`\b(syncpipe_\d+)_[0-9a-f]{4}\b`), "${1}_<random>"}, // slot names
	{regexp.MustCompile(`\bwrite \d+ changes\b`), "write <n> changes"},      // a batch: the change, or a heartbeat before it
	{regexp.MustCompile(`\bbatch \d+: (write|read)\b`), "batch <n>: $1"},    // how many batches (keepalives) the stream passed first
}

func normaliseSaid(s string) string {
	s = strings.TrimSpace(s)
	for _, n := range saidNormalisers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ↵ ")), " ")
}
