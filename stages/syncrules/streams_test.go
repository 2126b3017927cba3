package syncrules

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestStreamHash: the partition order hash gives PowerSync's values for
// plain columns (an expression "?" and its column's name).
func TestStreamHash(t *testing.T) {
	for col, want := range map[string]uint32{"c": 82895985, "owner_id": 104385299, "list_id": 292250135, "user_id": 533226539, "b": 534305345} {
		if got := streamHash("?", col); got != want {
			t.Errorf("streamHash(?, %s) = %d, want %d", col, got, want)
		}
	}
}

// TestStreamTables: the tables a streams file reads include its lookup
// tables, so replication publishes and snapshots them; the file's streams
// line is known.
func TestStreamTables(t *testing.T) {
	src := `config: {edition: 3}
streams:
  my_todos:
    auto_subscribe: true
    query: SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id())
`
	r, err := Parse([]byte(src), Options{GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tn := range r.Tables() {
		got = append(got, tn.String())
	}
	if want := []string{"public.lists", "public.todos"}; !slices.Equal(got, want) {
		t.Errorf("Tables() = %v, want %v", got, want)
	}
	if r.StreamsLine() != 2 {
		t.Errorf("StreamsLine() = %d, want 2", r.StreamsLine())
	}
	lists, err := r.Bind("lists", []string{"id", "owner_id"})
	if err != nil {
		t.Fatal(err)
	}
	if lists.HasData() || !lists.HasParameters() {
		t.Errorf("lists: HasData %v, HasParameters %v; want only parameters", lists.HasData(), lists.HasParameters())
	}
}

// TestStreamRefusals: the join and CTE shapes syncpipe does not compile are
// refused at load time, each error located (line and column) in the query
// or the CTE, never compiled into something else.
func TestStreamRefusals(t *testing.T) {
	const head = "config:\n  edition: 3\nwith:\n  o: SELECT org FROM m WHERE u = auth.user_id()\n  two: SELECT org, team FROM m\nstreams:\n  s:\n    query: "
	cases := map[string]string{
		"SELECT c.* FROM c LEFT JOIN m ON c.org = m.org":                                                   "joins are not supported",
		"SELECT c.* FROM c CROSS JOIN m WHERE c.org = m.org":                                               "joins are not supported",
		"SELECT c.* FROM c JOIN m USING (org)":                                                             "only [INNER] JOIN … ON",
		"SELECT c.* FROM c JOIN m ON c.org = m.org JOIN n ON c.team = n.team":                              "",
		"SELECT c.* FROM c JOIN m ON c.org = m.org JOIN m ON c.team = m.team":                              "a name of its own",
		"SELECT * FROM c JOIN m ON c.org = m.org":                                                          "select the synced table's columns as c.*",
		"SELECT c.id, m.role FROM c JOIN m ON c.org = m.org":                                               "only select from a single table",
		"SELECT c.* FROM c JOIN m ON c.org = m.org WHERE u = auth.user_id()":                               "Invalid unqualified reference",
		"SELECT c.* FROM c, m WHERE m.u = auth.user_id()":                                                  "must be joined with `=`",
		"SELECT c.* FROM c JOIN m ON c.org = m.org AND c.team = m.org":                                     "equal to two columns",
		"SELECT c.* FROM c JOIN m ON lower(c.org) = m.org":                                                 "must compare a column of each",
		"SELECT c.* FROM c JOIN m ON c.org = m.org AND m.u = auth.user_id() AND m.u = 'x'":                 "",
		"SELECT c.* FROM c JOIN m ON c.org = m.org WHERE m.u = auth.user_id() OR c.pub = 1":                "",
		"SELECT c.* FROM c, m WHERE (c.org = m.org AND m.u = auth.user_id()) OR c.pub = 1":                 "must join it",
		"SELECT c.* FROM c JOIN m ON c.org = m.org WHERE c.team IN (SELECT t FROM n)":                      "",
		"SELECT c.* FROM c JOIN m ON c.org = m.org AND m.u = auth.user_id() AND m.u = auth.parameter('u')": "two request values",
		"SELECT c.* FROM c JOIN c ON c.org = c.org":                                                        "a name of its own",
		"SELECT * FROM c WHERE NOT org IN o":                                                               "column IN cte",
		"SELECT * FROM c WHERE org IN two":                                                                 "single column",
		"SELECT * FROM o":                                                                                  "not a common table expression",
		"SELECT * FROM c WHERE org IN (SELECT nope FROM o)":                                                "has no column",
		"SELECT * FROM c WHERE org IN (SELECT org FROM m WHERE u = auth.user_id() OR u = 'x')":             "",
		"SELECT * FROM c WHERE org IN (SELECT org FROM m WHERE team IN (SELECT t FROM n))":                 "",
		"SELECT * FROM c WHERE org IN (SELECT org FROM m WHERE team IN (SELECT t FROM n WHERE a OR b))":    "OR (or NOT over AND)",
		"SELECT * FROM c WHERE org IN (SELECT org FROM m) AND org IN (SELECT org FROM n)":                  "",
		"SELECT c.* FROM c JOIN m ON c.org = m.org AND c.team = m.team WHERE c.org IN (SELECT org FROM n)": "gives several columns",
		"SELECT * FROM c WHERE org IN (SELECT org FROM m) AND org IN auth.parameter('o')":                  "",
		"SELECT c.* FROM c JOIN m ON c.org = m.org AND c.team = m.team WHERE c.org IN auth.parameter('o')": "an array and with a joined table",
		"SELECT c.* FROM c JOIN m ON c.org = m.org WHERE c.team IN (SELECT t FROM n WHERE n.x = m.x)":      "joined both to the synced table",
		"SELECT * FROM c WHERE org IN (SELECT org FROM m, n WHERE m.x = n.x)":                              "select from one table",
	}
	for q, want := range cases {
		r, err := Parse([]byte(head+yamlQuote(q)+"\n"), Options{GroupID: "1", File: "f.yaml"})
		if want == "" { // accepted
			if err != nil {
				t.Errorf("%s: %v", q, err)
			}
			continue
		}
		var es RuleErrors
		if !errors.As(err, &es) || r != nil && len(es) == 0 {
			t.Errorf("%s: accepted, want %q", q, want)
			continue
		}
		if !strings.Contains(es.Error(), want) || es[0].Line != 8 || es[0].Column <= 12 {
			t.Errorf("%s:\n got  %v\n want %q at line 8 in the query", q, es, want)
		}
	}
	// Errors in a CTE point into it, used or not.
	for with, want := range map[string]string{
		"x: SELECT org FROM m WHERE nosuch(u)":    "nosuch",
		"x: SELECT org FROM m, n":                 "must select from one table",
		"x: SELECT org FROM m WHERE org IN other": "IN in a condition",
		"x: SELECT * FROM m":                      "* columns are not allowed",
		"x: SELECT lower(org) AS o FROM m":        "columns of its table",
		"x: [SELECT org FROM m]":                  "Expected a scalar value here.",
	} {
		_, err := Parse([]byte("config:\n  edition: 3\nwith:\n  "+with+"\nstreams:\n  s:\n    query: SELECT * FROM c\n"), Options{GroupID: "1"})
		var es RuleErrors
		if !errors.As(err, &es) || !strings.Contains(es.Error(), want) || es[0].Line != 4 {
			t.Errorf("%s:\n got  %v\n want %q at line 4", with, err, want)
		}
	}
	_, err := Parse([]byte("with:\n  x: SELECT org FROM m\nbucket_definitions:\n  b:\n    data: [SELECT * FROM c]\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), "2:") || !strings.Contains(err.Error(), "Common table expressions are not supported") {
		t.Errorf("with: in edition 1: %v", err)
	}
}
