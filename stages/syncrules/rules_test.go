package syncrules

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

func parseErrs(t *testing.T, src string) RuleErrors {
	t.Helper()
	_, err := Parse([]byte(src), Options{File: "rules.yaml", GroupID: "1"})
	if err == nil {
		t.Fatalf("expected errors for:\n%s", src)
	}
	var es RuleErrors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, want RuleErrors", err)
	}
	return es
}

func TestErrorsNamePositionBucketQueryToken(t *testing.T) {
	src := `bucket_definitions:
  by_list:
    parameters: SELECT id AS list_id FROM lists WHERE owner = request.user_id()
    data:
      - SELECT * FROM todos WHERE list_id = bucket.list_id AND foo(x) = 1
      - SELECT a.id FROM todos a JOIN lists b ON a.list_id = b.id
  other:
    data:
      - SELECT count(*) AS n, id FROM todos
`
	es := parseErrs(t, src)
	want := []string{
		`rules.yaml:5:64: bucket "by_list" data[0]: unknown function "foo"`,
		`rules.yaml:6:34: bucket "by_list" data[1]: joins are not supported`,
		`rules.yaml:9:22: bucket "other" data[0]: aggregate functions are not supported`,
	}
	if len(es) != len(want) {
		t.Fatalf("got %d errors:\n%v", len(es), es)
	}
	for i, w := range want {
		if es[i].Error() != w {
			t.Errorf("error %d:\n got  %s\n want %s", i, es[i].Error(), w)
		}
	}
	if es[0].Token != "foo" || es[0].Bucket != "by_list" || es[0].Query != "data[0]" {
		t.Errorf("fields: %+v", *es[0])
	}
}

func TestLiteralBlockPositions(t *testing.T) {
	src := "bucket_definitions:\n  b:\n    data:\n      - |\n        SELECT id\n        FROM t\n        WHERE upper(x) = nope(y)\n"
	es := parseErrs(t, src)
	if len(es) != 1 || es[0].Line != 7 || es[0].Column != 26 || es[0].Token != "nope" {
		t.Fatalf("got %v (line %d col %d)", es, es[0].Line, es[0].Column)
	}
	// Double-quoted scalars are offset by the quote.
	es = parseErrs(t, "bucket_definitions:\n  b:\n    data: [\"SELECT id FROM t WHERE zz(1)\"]\n")
	if es[0].Line != 3 || es[0].Column != 36 {
		t.Fatalf("quoted: %v", es[0])
	}
}

func TestRejectedConstructs(t *testing.T) {
	cases := map[string]string{
		"SELECT id FROM (SELECT 1) x":                      "subqueries are not supported",
		"SELECT id FROM t WHERE x IN (SELECT y FROM u)":    "subqueries are not supported",
		"SELECT id FROM t, u":                              "joins are not supported",
		"SELECT id FROM t LEFT JOIN u ON true":             "joins are not supported",
		"SELECT id FROM t ORDER BY id":                     "ORDER BY is not supported",
		"SELECT id FROM t LIMIT 1":                         "LIMIT is not supported",
		"SELECT id FROM t GROUP BY id":                     "GROUP BY is not supported",
		"SELECT DISTINCT id FROM t":                        "DISTINCT is not supported",
		"SELECT id, sum(x) AS s FROM t":                    `aggregate function "sum" is not supported`,
		"SELECT id, nope(x) AS s FROM t":                   `unknown function "nope"`,
		"SELECT id, upper(x) FROM t":                       "alias is required",
		"SELECT id FROM t WHERE x LIKE 'a%'":               "LIKE is not supported",
		"SELECT id FROM t WHERE x BETWEEN 1 AND 2":         "BETWEEN is not supported",
		"SELECT id FROM t WHERE x NOT IN '[1]'":            "NOT IN is not supported",
		"SELECT id, CASE WHEN x THEN 1 END AS c FROM t":    "CASE expressions are not supported",
		"SELECT id, request.user_id() AS u FROM t":         "request functions are not available in data queries",
		"SELECT id FROM t WHERE x = token_parameters.y":    "token_parameters is not available in data queries",
		"SELECT id, x -> y AS j FROM t":                    "must be a string literal",
		"SELECT id FROM t WHERE x = 1; SELECT 2":           "only a single statement",
		"UPDATE t SET x = 1":                               "only SELECT statements",
		"SELECT name FROM t":                               `must return an "id" column`,
		"SELECT id FROM json_each('[1]')":                  "only supported in parameter queries",
		"SELECT id FROM t WHERE x = ?":                     "query parameters are not supported",
		"SELECT id FROM t WHERE x = 'unterminated":         "unterminated string",
		"SELECT id, CAST(x AS varchar) AS c FROM t":        `CAST to "varchar" is not supported`,
		"SELECT id, json_each(x) AS c FROM t":              "json_each is only supported",
		"SELECT id, x.y.z.w AS c FROM t":                   "too many name parts",
		"SELECT id FROM t WHERE other.x = 1":               `undefined table "other"`,
		"SELECT id, x IS TRUE AS c FROM t":                 "only IS [NOT] NULL",
		"SELECT id FROM t WHERE x = 1 GROUP BY x HAVING 1": "GROUP BY is not supported",
		"WITH a AS (SELECT 1) SELECT id FROM a":            "WITH (CTE) is not supported",
		"SELECT id, upper() AS u FROM t":                   "upper() takes 1 argument, got 0",
		"SELECT id FROM t WHERE bucket.x = 1":              "must cover all bucket parameters",
		"SELECT id, - x AS c FROM t":                       "unary - is only supported in front of a number",
		"SELECT id, json_extract('{}', 'a') AS c FROM t":   "JSON path must start with $",
		"SELECT id, substring('a', 1, 2, 3) AS c FROM t":   "substring() takes 2 to 3 arguments",
		"SELECT id, \"\" AS c FROM t":                      "zero-length quoted identifier",
		"SELECT id, 1abc AS c FROM t":                      "invalid number",
		"SELECT id FROM t WHERE x = 1 /* open":             "unterminated comment",
		"SELECT id, x[1] AS c FROM t":                      "array subscripts are not supported",
		"SELECT id, s.t.c AS c FROM t":                     "schema names are not supported",
		"SELECT id FROM t WHERE request.user_id = 'a'":     "is a function: write request.user_id()",
		"SELECT id FROM t WHERE request.user_id() = 'a'":   "request functions are not available",
		"SELECT id, other.* FROM t":                        `undefined table "other"`,
		"SELECT id, sum(x) OVER () AS s FROM t":            "aggregate function",
		"SELECT id, x @ y AS s FROM t":                     "operator @ is not supported",
		"SELECT id FROM t WHERE EXISTS (SELECT 1)":         "EXISTS expressions are not supported",
		"SELECT id, x -> 'a' -> 1 AS j FROM t":             "must be a string literal",
		"SELECT id, (x AS c FROM t":                        "expected )",
		"SELECT id FROM":                                   "expected a table name",
		"SELECT":                                           "unexpected end of query",
		"SELECT id FROM t WHERE":                           "unexpected end of query",
		"SELECT id FROM t WHERE x = 1 AND":                 "unexpected end of query",
		"SELECT id, COUNT(DISTINCT x) AS n FROM t":         "aggregate functions are not supported",
		"SELECT id FROM t AS":                              "expected an alias",
		"SELECT id FROM t WHERE x IN bucket.y":             "cannot use bucket parameters on the right side of IN",
		"SELECT id, upper(bucket.y) AS u FROM t":           "cannot use bucket parameters in expressions",
		"SELECT id FROM t WHERE bucket.a = bucket.b":       "both sides of = operator",
		"SELECT id FROM t WHERE (x = bucket.y) = 1":        "cannot be compared with =",
		"SELECT id FROM t WHERE NOT (x = bucket.y)":        "parameter match clauses cannot be used inside NOT",
	}
	for sql, want := range cases {
		src := "bucket_definitions:\n  b:\n    data:\n      - " + yamlQuote(sql) + "\n"
		es := parseErrs(t, src)
		if !strings.Contains(es.Error(), want) {
			t.Errorf("%s:\n got  %v\n want %q", sql, es, want)
		}
		for _, e := range es {
			if e.Bucket != "b" || e.Query != "data[0]" || e.Line != 4 {
				t.Errorf("%s: error lacks bucket/query/line: %+v", sql, *e)
			}
		}
	}
}

func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func TestParameterQueryErrors(t *testing.T) {
	cases := map[string]string{
		"SELECT * FROM lists":              "* is not supported in parameter queries",
		"SELECT upper(id) AS x FROM lists": "plain columns",
		"SELECT l.id AS x FROM lists l":    "table aliases are not supported",
		"SELECT id AS x FROM lists WHERE a IN request.jwt() -> 'a' AND b IN request.jwt() -> 'b'": "multiple array input parameters",
		"SELECT id AS x FROM lists WHERE request.user_id() IN a AND request.user_id() IN b":       "multiple IN expressions",
		"SELECT id AS x FROM lists WHERE a = request.user_id() OR b = token_parameters.t":         "same parameters",
		"SELECT id AS x WHERE 1":                                                   "without FROM can only use request values",
		"SELECT x WHERE request.user_id() = 'a'":                                   "parameter query without FROM",
		"SELECT bucket.x AS y":                                                     "bucket parameters can only be used in data queries",
		"SELECT value AS x FROM json_each(id)":                                     "parameter query without FROM",
		"SELECT value AS x FROM json_each('[1]', 2)":                               "json_each() takes 1 argument",
		"SELECT value AS x FROM generate_series(1, 2)":                             "only json_each",
		"SELECT value AS x FROM json_each('[1]') WHERE nope = 1":                   `json_each has no column "nope"`,
		"SELECT request.foo() AS x":                                                `unknown function "request.foo"`,
		"SELECT request.jwt(1) AS x":                                               "takes 0 arguments",
		"SELECT id AS x, 7 AS _priority FROM lists":                                "_priority must be an integer literal from 0 to 3",
		"SELECT id AS x, id AS x FROM lists":                                       "selected twice",
		"SELECT id AS x FROM lists WHERE request.user_id() = id2 || request.jwt()": "same expression",
	}
	for sql, want := range cases {
		src := "bucket_definitions:\n  b:\n    parameters: " + yamlQuote(sql) + "\n    data:\n      - SELECT id FROM t WHERE y = bucket.x\n"
		es := parseErrs(t, src)
		if !strings.Contains(es.Error(), want) {
			t.Errorf("%s:\n got  %v\n want %q", sql, es, want)
		}
	}
}

func TestDocumentErrors(t *testing.T) {
	cases := map[string]string{
		"bucket_definitions: [1]":                                                                                          "must be a mapping",
		"nope: 1\nbucket_definitions: {}":                                                                                  `unknown key "nope"`,
		"streams: {s: {query: SELECT * FROM t}}\nbucket_definitions: {}":                                                   "Sync streams require edition 2 or later",
		"config: {edition: 3}\nbucket_definitions: {}":                                                                     "'bucket_definitions' are not supported",
		"config: {edition: 3}\nstreams: {s: {queries: SELECT * FROM t}}":                                                   "queries must be a list",
		"config: {edition: 3}\nstreams: {s: {query: SELECT * FROM t, queries: [SELECT * FROM t]}}":                         "One of `queries` or `query` must be given.",
		"config: {edition: 3}\nstreams: {s: {with: {a: SELECT 1}, query: SELECT * FROM t}}":                                "a common table expression must select from one table",
		"config: {edition: 3}\nstreams: {s: {priority: 1}}":                                                                "One of `queries` or `query` must be given.",
		"config: {edition: 3}\nstreams: {s: {query: SELECT * FROM t, priority: 4}}":                                        "Invalid priority",
		"config: {edition: 3}\nstreams: {s: {query: \"SELECT * FROM t WHERE a = upper(auth.user_id())\"}}":                 `auth.user_id() is not supported here yet`,
		"config: {edition: 4}\nbucket_definitions: {}":                                                                     "edition must be 1",
		"config: {edition: 2}\nstreams: {s: {queries: [SELECT * FROM t]}}":                                                 "Multiple queries not supported",
		"config: {edition: 2}\nstreams: {s: {query: \"SELECT * FROM t WHERE id IN (SELECT x FROM u)\"}}":                   "subqueries in edition-2 streams are not supported yet",
		"config: {edition: 2}\nbucket_definitions: {s: {data: [SELECT * FROM t]}}\nstreams: {s: {query: SELECT * FROM t}}": "Duplicate stream or bucket definition.",
		"config: {edition: 1, foo: 1}\nbucket_definitions: {}":                                                             `config option "foo"`,
		"{}": "bucket_definitions is required",
		"":   "empty sync rules",
		"bucket_definitions:\n  b: {parameters: SELECT 1 AS x}":                                                   "data is required",
		"bucket_definitions:\n  b: {data: SELECT id FROM t}":                                                      "data must be a list",
		"bucket_definitions:\n  b: {priority: 5, data: []}":                                                       "priority must be an integer from 0 to 3",
		"bucket_definitions:\n  b: {priority: x, data: []}":                                                       "priority must be an integer",
		"bucket_definitions:\n  b: {extra: 1, data: []}":                                                          `unknown key "extra"`,
		"bucket_definitions:\n  b: {data: [null]}":                                                                "expected an SQL query string",
		"bucket_definitions:\n  b: {data: [], parameters: {a: 1}}":                                                "parameters must be a query or a list",
		"bucket_definitions:\n  b:\n    data: []\n  b:\n    data: []":                                             "duplicate bucket definition",
		"bucket_definitions:\n  b: [":                                                                             "invalid YAML",
		"bucket_definitions:\n  b: {data: [], accept_potentially_dangerous_queries: 3}":                           "must be true or false",
		"bucket_definitions:\n  b:\n    parameters: [SELECT 1 AS a, SELECT 2 AS b]\n    data: []":                 "same bucket parameters",
		"bucket_definitions:\n  b:\n    priority: 1\n    parameters: SELECT 1 AS a, 0 AS _priority\n    data: []": "cannot set priority multiple times",
	}
	for src, want := range cases {
		es := parseErrs(t, src)
		if !strings.Contains(es.Error(), want) {
			t.Errorf("%q:\n got  %v\n want %q", src, es, want)
		}
	}
	es := parseErrs(t, "bucket_definitions:\n  b:\n    data: [\n")
	if es[0].Line == 0 {
		t.Errorf("YAML syntax error without line: %v", es)
	}
}

func TestAllErrorsAtOnceSortedByPosition(t *testing.T) {
	src := "bucket_definitions:\n  a:\n    data:\n      - SELECT id, f1(x) AS a, f2(y) AS b FROM t\n  b:\n    bogus: 1\n    data:\n      - SELECT id FROM t LIMIT 2\n"
	es := parseErrs(t, src)
	if len(es) != 4 {
		t.Fatalf("want 4 errors, got %v", es)
	}
	for i := 1; i < len(es); i++ {
		if es[i-1].Line > es[i].Line || (es[i-1].Line == es[i].Line && es[i-1].Column > es[i].Column) {
			t.Fatalf("not sorted: %v", es)
		}
	}
	var re *RuleError
	if !errors.As(error(es), &re) || re.Token != "f1" {
		t.Fatalf("errors.As: %v", re)
	}
}

func TestRuleErrorFormat(t *testing.T) {
	cases := []struct {
		e    RuleError
		want string
	}{
		{RuleError{File: "r.yaml", Line: 3, Column: 4, Bucket: "b", Query: "data[0]", Msg: "m"}, `r.yaml:3:4: bucket "b" data[0]: m`},
		{RuleError{Line: 3, Msg: "m"}, `3: m`},
		{RuleError{Bucket: "b", Msg: "m"}, `bucket "b": m`},
		{RuleError{Msg: "m"}, `m`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q want %q", got, c.want)
		}
	}
}

const todosRules = `bucket_definitions:
  global:
    data:
      - SELECT * FROM lists
  by_list:
    parameters: SELECT id AS list_id FROM lists
    data:
      - SELECT * FROM todos WHERE list_id = bucket.list_id
`

var todoCols = []string{"id", "list_id", "description", "completed", "created_at"}

func mustParse(t testing.TB, src string) *Rules {
	t.Helper()
	r, err := Parse([]byte(src), Options{File: "rules.yaml", GroupID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCheckSchema(t *testing.T) {
	r := mustParse(t, `bucket_definitions:
  a:
    parameters: SELECT id AS x FROM owners WHERE email = request.jwt() ->> 'email'
    data:
      - SELECT id, titel AS title FROM todos WHERE list_id = bucket.x
  b:
    data:
      - SELECT * FROM nope
      - SELECT * FROM "Keyless"
`)
	es := r.CheckSchema(Schema{
		"todos":           todoCols,
		"public.owners":   {"id", "mail"},
		"public.Keyless":  {"k", "v"},
		"other.unrelated": {"id"},
	})
	// Warnings, as PowerSync reports them: the rules still run.
	want := []string{
		`rules.yaml:3:50: bucket "a" parameters: warning: column "email" does not exist in table public.owners`,
		`rules.yaml:5:20: bucket "a" data[0]: warning: column "titel" does not exist in table public.todos`,
		`rules.yaml:8:23: bucket "b" data[0]: warning: table public.nope does not exist in the source`,
		`rules.yaml:9:16: bucket "b" data[1]: warning: table public.Keyless has no "id" column; select one with an alias, e.g. "SELECT pk AS id, *"`,
	}
	if len(es) != len(want) {
		t.Fatalf("got %v", es)
	}
	for i := range want {
		if es[i].Error() != want[i] {
			t.Errorf("got  %s\nwant %s", es[i].Error(), want[i])
		}
	}
	if err := mustParse(t, todosRules).CheckSchema(Schema{"todos": todoCols, "lists": {"id", "name"}}); err != nil {
		t.Fatalf("valid schema rejected: %v", err)
	}
}

func TestTablesAndDefinitions(t *testing.T) {
	r := mustParse(t, todosRules+"  other:\n    priority: 0\n    data:\n      - SELECT id FROM app.items\n")
	var names []string
	for _, tb := range r.Tables() {
		names = append(names, tb.String())
	}
	if strings.Join(names, ",") != "app.items,public.lists,public.todos" {
		t.Errorf("tables = %v", names)
	}
	defs := r.Definitions()
	if len(defs) != 3 || defs[1].Name != "by_list" || defs[1].BucketParameters[0] != "list_id" ||
		defs[1].ParameterQueries != 1 || defs[2].Priority != 0 || defs[0].Priority != 3 {
		t.Errorf("definitions = %+v", defs)
	}
	if r.GroupID() != "1" {
		t.Error("group id")
	}
	bt, err := r.Bind("app.items", []string{"id"})
	if err != nil || !bt.HasData() || bt.HasParameters() {
		t.Fatalf("bind app.items: %v", err)
	}
	bt, _ = r.Bind("items", []string{"id"})
	if bt.HasData() {
		t.Error("public.items must not match app.items")
	}
	if bt.Table().String() != "public.items" {
		t.Errorf("table = %v", bt.Table())
	}
	if _, err := r.Bind("todos", []string{"id", "id"}); err == nil {
		t.Error("duplicate column accepted")
	}
}

func TestBindHandlesMissingAndExtraColumns(t *testing.T) {
	r := mustParse(t, `bucket_definitions:
  g:
    data:
      - SELECT id, gone, upper(gone) AS up, name AS n FROM t
`)
	bt, _ := r.Bind("t", []string{"name", "id", "extra"})
	ev := bt.NewEvaluator()
	out, _, err := ev.EvaluateRow([]model.Value{model.Text("x"), model.Int(1), model.Text("e")}, nil, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("%v %v", out, err)
	}
	// A column the table lacks is undefined: omitted; expressions see NULL.
	if got := string(out[0].Data); got != `{"id":1,"up":null,"n":"x"}` {
		t.Errorf("data = %s", got)
	}
	if _, _, err := ev.EvaluateRow([]model.Value{model.Text("x")}, nil, nil); !errors.Is(err, errRowWidth) {
		t.Errorf("short row: %v", err)
	}
	if _, _, err := ev.EvaluateParameterRow([]model.Value{model.Text("x")}, nil, nil); !errors.Is(err, errRowWidth) {
		t.Errorf("short parameter row: %v", err)
	}
}

func TestStarDoesNotOverwriteEarlierColumns(t *testing.T) {
	r := mustParse(t, `bucket_definitions:
  g:
    data:
      - SELECT upper(name) AS name, NULL AS id, * FROM t
      - SELECT *, 'z' AS name FROM t AS u
`)
	bt, _ := r.Bind("t", []string{"id", "name", "_x"})
	out, _, err := bt.NewEvaluator().EvaluateRow([]model.Value{model.Text("i"), model.Text("ab"), model.Int(1)}, nil, nil)
	if err != nil || len(out) != 2 {
		t.Fatal(out, err)
	}
	// ??= semantics: * fills NULL/absent outputs but keeps earlier values and positions.
	if got := string(out[0].Data); got != `{"name":"AB","id":"i"}` {
		t.Errorf("data[0] = %s", got)
	}
	if got := string(out[1].Data); got != `{"id":"i","name":"z"}` || out[1].ObjectType != "u" {
		t.Errorf("data[1] = %s (%s)", got, out[1].ObjectType)
	}
}

func TestEvaluatorOutputsAliasCallerBuffers(t *testing.T) {
	r := mustParse(t, todosRules)
	bt, _ := r.Bind("todos", todoCols)
	ev := bt.NewEvaluator()
	var out []Output
	var buf []byte
	for i := 0; i < 50; i++ {
		out, buf, _ = ev.EvaluateRow([]model.Value{model.Text("t"), model.Text(strings.Repeat("l", i)), model.Text("d"), model.Int(0), model.Null()}, out, buf)
	}
	if len(out) != 49 { // i == 0 gives list_id "" which is a valid (non-NULL) parameter
		if len(out) != 50 {
			t.Fatalf("outputs = %d", len(out))
		}
	}
	for i, o := range out {
		want := `1#by_list["` + strings.Repeat("l", i) + `"]`
		if o.Bucket != want || !strings.Contains(string(o.Data), `"list_id":"`+strings.Repeat("l", i)+`"`) {
			t.Fatalf("output %d corrupted: %s %s", i, o.Bucket, o.Data)
		}
	}
}

func TestEvaluateRowAllocations(t *testing.T) {
	r := mustParse(t, todosRules)
	bt, _ := r.Bind("todos", todoCols)
	ev := bt.NewEvaluator()
	row := []model.Value{model.Text("0b7ad3a6-5f7e-4c1b-9d0a-1f2e3d4c5b6a"), model.Text("9c8b7a6f-5e4d-4c3b-2a19-0f8e7d6c5b4a"),
		model.Text("Buy milk and eggs and bread and butter and cheese and ham."), model.Int(1), model.Text("2024-05-01 10:00:00.123456Z")}
	out := make([]Output, 0, 4)
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(1000, func() {
		out, buf, _ = ev.EvaluateRow(row, out[:0], buf[:0])
	})
	if len(out) != 1 || allocs > 1 {
		t.Fatalf("outputs %d, allocs per row %v (want ≤ 1: the bucket id string)", len(out), allocs)
	}
	lt, _ := r.Bind("lists", []string{"id", "name", "owner_id"})
	lev := lt.NewEvaluator()
	lrow := []model.Value{model.Text("l1"), model.Text("n"), model.Text("u")}
	var le []LookupEntry
	allocs = testing.AllocsPerRun(1000, func() {
		out, buf, _ = lev.EvaluateRow(lrow, out[:0], buf[:0])
		le, buf, _ = lev.EvaluateParameterRow(lrow, le[:0], buf)
	})
	if allocs > 0 {
		t.Fatalf("global bucket + lookup allocate %v per row", allocs)
	}
}

func TestConcurrentEvaluators(t *testing.T) {
	r := mustParse(t, todosRules)
	bt, _ := r.Bind("todos", todoCols)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			ev := bt.NewEvaluator()
			for i := 0; i < 200; i++ {
				id := strings.Repeat("x", g+1)
				out, _, err := ev.EvaluateRow([]model.Value{model.Text("t"), model.Text(id), model.Text("d"), model.Int(0), model.Null()}, nil, nil)
				if err != nil || len(out) != 1 || out[0].Bucket != `1#by_list["`+id+`"]` {
					t.Errorf("goroutine %d: %v %v", g, out, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestRequestErrorsAndMerge(t *testing.T) {
	r := mustParse(t, `bucket_definitions:
  a:
    parameters:
      - SELECT value AS x FROM json_each(request.parameters() ->> 'list')
      - SELECT 'one' AS x
      - SELECT request.user_id() AS x
    data:
      - SELECT id FROM t WHERE y = bucket.x
`)
	if _, err := r.Request(Request{Claims: []byte("{")}); err == nil {
		t.Error("bad claims accepted")
	}
	if _, err := r.Request(Request{Parameters: []byte("[1]")}); err == nil {
		t.Error("non-object parameters accepted")
	}
	// A query failing for the request fails the request, as in PowerSync.
	plan, err := r.Request(Request{UserID: "one", Parameters: []byte(`{"list":"{bad"}`)})
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Query != "parameters[0]" || ee.Bucket != "a" || plan != nil {
		t.Fatalf("plan %v, err = %v", plan, err)
	}
	merged := MergeBuckets([]BucketRef{{ID: "x", Priority: 3}, {ID: "y", Priority: 1}, {ID: "x", Priority: 0}})
	if len(merged) != 2 || merged[0].ID != "x" || merged[0].Priority != 0 || merged[1].ID != "y" {
		t.Fatalf("merge = %v", merged)
	}
	var l Lookup
	if _, err := l.Buckets([]byte("[]"), nil); err == nil {
		t.Error("zero Lookup must fail")
	}
}

func TestLookupBucketsRejectsBadRows(t *testing.T) {
	r := mustParse(t, todosRules)
	plan, _ := r.Request(Request{UserID: "u"})
	l := plan.Lookups[0]
	for _, rows := range []string{"{", `{"a":1}`, `[1]`} {
		if _, err := l.Buckets([]byte(rows), nil); err == nil {
			t.Errorf("rows %s accepted", rows)
		}
	}
}

func TestUngroupedBucketIDs(t *testing.T) {
	r, err := Parse([]byte(todosRules), Options{})
	if err != nil {
		t.Fatal(err)
	}
	bt, _ := r.Bind("todos", todoCols)
	out, _, _ := bt.NewEvaluator().EvaluateRow([]model.Value{model.Text("t"), model.Text("l"), model.Null(), model.Null(), model.Null()}, nil, nil)
	if out[0].Bucket != `by_list["l"]` {
		t.Fatalf("bucket = %s", out[0].Bucket)
	}
}

func TestDeepNestingRejected(t *testing.T) {
	sql := "SELECT id FROM t WHERE " + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000)
	es := parseErrs(t, "bucket_definitions:\n  b:\n    data:\n      - "+yamlQuote(sql)+"\n")
	if !strings.Contains(es.Error(), "nested too deeply") {
		t.Fatal(es)
	}
	ok := "SELECT id FROM t WHERE " + strings.Repeat("(", 50) + "1" + strings.Repeat(")", 50)
	mustParse(t, "bucket_definitions:\n  b:\n    data:\n      - "+yamlQuote(ok)+"\n")
}
