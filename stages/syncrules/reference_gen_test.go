package syncrules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// The case generator of the differential test. It is seeded, so a seed
// always yields the same cases; each family below covers one part of the
// language, and values are drawn from pools that hold every SQLite type,
// the coercion corner cases (numeric-looking text, JSON text, integral
// REALs, NaN, int64 extremes, non-ASCII text, blobs) and NULL.

type gen struct{ r *rand.Rand }

func generateCases(seed uint64, n int) []refCase {
	g := &gen{r: rand.New(rand.NewPCG(seed, 0x5eed5eed))}
	families := []struct {
		name string
		make func() refCase
	}{
		{"select", g.selectCase},
		{"filter", g.filterCase},
		{"bucket_param", g.bucketParamCase},
		{"static", g.staticCase},
		{"table_param", g.tableParamCase},
		{"json_each", g.jsonEachCase},
		{"rejected", g.rejectedCase},
		{"schema", g.schemaCase},
	}
	out := make([]refCase, 0, n)
	for i := 0; i < n; i++ {
		f := families[i%len(families)]
		c := f.make()
		c.Name = fmt.Sprintf("seed %d #%d %s", seed, i, f.name)
		out = append(out, c)
	}
	return out
}

func (g *gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }
func (g *gen) chance(p float64) bool    { return g.r.Float64() < p }

// Value pools: [tag, value] as the driver encodes them.
var (
	poolText = []string{"", "a", "abc", "ABC", "Straße", "ǅx", "12", "-12", "+7", " 42abc", "3.5", ".5", "-.5e1", "1e3", "0x10",
		"日本語", "😀x", "null", "true", "u1", "t1", "l1", "admin",
		`[1,2,"a"]`, `["a","b",null]`, `[1.0,2.5,9007199254740993]`, `["u1","t1"]`, `[]`, `[[1],{"a":1}]`,
		`{"a":1,"b":{"c":"d"},"2":true}`, `{"a":null}`, `{}`, `{"a":[1,2,3],"b":1.50}`, "$.a", "not json", `{"a":`}
	// Integers that arithmetic could take past int64 (where PowerSync's
	// BigInt goes on and syncpipe turns REAL, doc.go) live only in the
	// "big" column, which expressions never read.
	poolInt  = []int64{0, 1, -1, 2, 42, -7, 1000}
	poolBig  = []int64{9007199254740993, math.MaxInt64, math.MinInt64, -9007199254740993}
	poolReal = []float64{0, 1, -1, 1.5, -2.25, 0.1, 1e21, 1e-7, 123456789.125, 2, math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1)}
	poolBlob = []string{"", "616263", "00ff10", "e29883", "7b2261223a317d"}
)

func realText(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// value draws a random value of any type.
func (g *gen) value() [2]string {
	switch g.r.IntN(10) {
	case 0:
		return [2]string{"n", ""}
	case 1, 2:
		return [2]string{"i", strconv.FormatInt(poolInt[g.r.IntN(len(poolInt))], 10)}
	case 3, 4:
		return [2]string{"r", realText(poolReal[g.r.IntN(len(poolReal))])}
	case 5:
		return [2]string{"b", poolBlob[g.r.IntN(len(poolBlob))]}
	}
	return [2]string{"t", poolText[g.r.IntN(len(poolText))]}
}

// matchValue draws from a small pool so that rows and requests meet.
func (g *gen) matchValue() [2]string {
	switch g.r.IntN(9) {
	case 0:
		return [2]string{"n", ""}
	case 1:
		return [2]string{"i", g.pick("1", "2")}
	case 2:
		return [2]string{"r", g.pick("1", "2.5")}
	case 3:
		return [2]string{"b", "7531"}
	}
	return [2]string{"t", g.pick("u1", "u2", "t1", "l1", "l2", "1", "")}
}

func col(name string, v [2]string) [3]string { return [3]string{name, v[0], v[1]} }

// itemsRow is a row of the items table: id, c0..c3 of any type, arr (a JSON
// array, mostly) and js (a JSON object, mostly).
func (g *gen) itemsRow() refRow {
	id := [2]string{"t", g.pick("i1", "i2", "i3", "i4")}
	switch g.r.IntN(8) {
	case 0:
		id = [2]string{"i", g.pick("7", "-3")}
	case 1:
		id = g.value()
	}
	arr := [2]string{"t", g.pick(`["u1","t1"]`, `[1,2.5,"1"]`, `[null,"u2",true]`, `[]`, `[{"a":1},[2]]`, `[9007199254740993,1.0]`)}
	if g.chance(0.15) {
		arr = g.value()
	}
	js := [2]string{"t", g.pick(`{"a":1,"b":{"c":"d"}}`, `{"a":"x","n":null}`, `{"2":1,"a":[1,2]}`, `{}`, `{"a":1.0}`)}
	if g.chance(0.15) {
		js = g.value()
	}
	row := refRow{Table: "items", Row: [][3]string{col("id", id)}}
	for i := 0; i < 4; i++ {
		v := g.value()
		if i < 2 && g.chance(0.5) {
			v = g.matchValue()
		}
		row.Row = append(row.Row, col("c"+strconv.Itoa(i), v))
	}
	row.Row = append(row.Row, col("arr", arr), col("js", js), col("big", [2]string{"i", strconv.FormatInt(poolBig[g.r.IntN(len(poolBig))], 10)}))
	if g.chance(0.2) {
		row.Row = append(row.Row, col("_hidden", g.value()))
	}
	return row
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (g *gen) literal() string {
	switch g.r.IntN(9) {
	case 0:
		return "NULL"
	case 1:
		return g.pick("TRUE", "FALSE")
	case 2, 3:
		return g.pick("0", "1", "2", "-3", "42")
	case 4:
		return g.pick("1.5", "2.0", "-0.5", "1e3", "0.1")
	}
	return sqlString(poolText[g.r.IntN(len(poolText))])
}

var jsonPaths = []string{"a", "$.a", "$.b.c", "b.c", "$", "0", "$.0", "$.a.1", "length", "$.n", "2", "$.2"}

// rowExpr is a random expression over the row (no request values).
func (g *gen) rowExpr(depth int) string {
	if depth <= 0 || g.chance(0.25) {
		if g.chance(0.6) {
			return g.pick("c0", "c1", "c2", "c3", "arr", "js", "id", "items.c0", "c1")
		}
		return g.literal()
	}
	sub := func() string { return g.rowExpr(depth - 1) }
	switch g.r.IntN(13) {
	case 0, 1:
		return "(" + sub() + " " + g.pick("=", "!=", "<", ">", "<=", ">=") + " " + sub() + ")"
	case 2:
		return "(" + sub() + " " + g.pick("+", "-", "*", "/") + " " + sub() + ")"
	case 3:
		return "(" + sub() + " || " + sub() + ")"
	case 4:
		return "(" + sub() + " " + g.pick("AND", "OR") + " " + sub() + ")"
	case 5:
		return "(" + sub() + g.pick(" IS NULL", " IS NOT NULL") + ")"
	case 6:
		return "(NOT " + sub() + ")"
	case 7:
		return "(" + sub() + " IN " + g.pick("arr", "c2", sqlString(g.pick(`["a",1,2.5,null]`, `[1,"1",true]`, `["u1"]`, `[]`))) + ")"
	case 8:
		return "(" + g.pick("js", "arr", "c0", sub()) + g.pick(" -> ", " ->> ") + sqlString(g.pick(jsonPaths...)) + ")"
	case 9:
		return "CAST(" + sub() + " AS " + g.pick("text", "integer", "real", "numeric", "blob") + ")"
	}
	return g.call(sub)
}

// call is a random scalar function call with arguments from sub.
func (g *gen) call(sub func() string) string {
	switch g.r.IntN(15) {
	case 0:
		return g.pick("upper", "lower") + "(" + sub() + ")"
	case 1:
		return g.pick("length", "hex", "base64", "typeof", "json_valid") + "(" + sub() + ")"
	case 2:
		if g.chance(0.5) {
			return "substring(" + sub() + ", " + g.pick("0", "1", "2", "-2", sub()) + ")"
		}
		return "substring(" + sub() + ", " + g.pick("0", "1", "2", "-2", sub()) + ", " + g.pick("0", "2", "-1", "10", sub()) + ")"
	case 3:
		return "ifnull(" + sub() + ", " + sub() + ")"
	case 4:
		return "iif(" + sub() + ", " + sub() + ", " + sub() + ")"
	case 5:
		return "json_extract(" + g.pick("js", "arr", sub()) + ", " + sqlString(g.pick(jsonPaths...)) + ")"
	case 6:
		if g.chance(0.5) {
			return "json_array_length(" + g.pick("arr", "js", sub()) + ")"
		}
		return "json_array_length(" + g.pick("js", sub()) + ", " + sqlString(g.pick("$.a", "$", "$.b", "a")) + ")"
	case 7:
		return "json_keys(" + g.pick("js", sub()) + ")"
	case 8:
		return "instr(" + sub() + ", " + sub() + ")"
	}
	return g.pick("upper", "lower", "length", "typeof", "hex") + "(" + sub() + ")"
}

// yamlQuery renders a query as a YAML scalar on one line: plain where YAML
// allows it, double-quoted otherwise.
func yamlQuery(q string) string {
	plain := !strings.ContainsAny(q, "#\t\\") && !strings.Contains(q, ": ") && !strings.HasSuffix(q, ":") &&
		!strings.ContainsAny(q[:1], "!&*[]{}|>'\"%@`,?:-") && !strings.HasSuffix(q, " ")
	if plain {
		return q
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(q)
	return strings.TrimSuffix(b.String(), "\n")
}

// bucketDef renders one bucket definition.
type bucketDef struct {
	name     string
	params   []string // nil: none; one without list: a scalar
	list     bool
	data     []string
	priority string
	extra    string // raw YAML lines, indented by 4
}

func renderRules(defs ...bucketDef) string {
	var b strings.Builder
	b.WriteString("bucket_definitions:\n")
	for _, d := range defs {
		fmt.Fprintf(&b, "  %s:\n", d.name)
		if d.priority != "" {
			fmt.Fprintf(&b, "    priority: %s\n", d.priority)
		}
		if d.extra != "" {
			b.WriteString(d.extra)
		}
		switch {
		case len(d.params) == 1 && !d.list:
			fmt.Fprintf(&b, "    parameters: %s\n", yamlQuery(d.params[0]))
		case len(d.params) > 0:
			b.WriteString("    parameters:\n")
			for _, p := range d.params {
				fmt.Fprintf(&b, "      - %s\n", yamlQuery(p))
			}
		}
		b.WriteString("    data:\n")
		for _, q := range d.data {
			fmt.Fprintf(&b, "      - %s\n", yamlQuery(q))
		}
	}
	return b.String()
}

func (g *gen) itemsRows(n int) []refRow {
	rows := make([]refRow, n)
	for i := range rows {
		rows[i] = g.itemsRow()
	}
	return rows
}

// selectCase: expressions in the SELECT list of several data queries of
// one bucket, with aliases, * and a table alias.
func (g *gen) selectCase() refCase {
	q1 := "SELECT id, " + g.rowExpr(3) + " AS v1, " + g.rowExpr(2) + " AS v2 FROM items"
	q2 := "SELECT " + g.pick("*", "id, c0", "c0 AS id, *", "*, "+g.rowExpr(2)+" AS c0") + " FROM items"
	q3 := "SELECT it.id, " + g.rowExpr(3) + " AS v FROM items AS it"
	if g.chance(0.3) {
		q3 = "SELECT " + g.rowExpr(2) + " AS id, c1 AS " + g.pick("x", "\"Mixed Case\"", "data") + " FROM items " + g.pick("", "AS alias_t")
	}
	return refCase{Rules: renderRules(bucketDef{name: "b", data: []string{q1, q2, q3}}), Rows: g.itemsRows(3)}
}

// filterCase: row-only WHERE clauses deciding membership of a global bucket.
func (g *gen) filterCase() refCase {
	d := bucketDef{name: "g", data: []string{
		"SELECT * FROM items WHERE " + g.rowExpr(3),
		"SELECT id, c0 FROM items WHERE " + g.rowExpr(2),
	}}
	if g.chance(0.3) {
		d.priority = g.pick("0", "1", "2")
	}
	return refCase{Rules: renderRules(d), Rows: g.itemsRows(3)}
}

// reqExpr is a random request-side expression (parameter queries).
func (g *gen) reqExpr(depth int) string {
	if depth <= 0 || g.chance(0.4) {
		return g.pick("request.user_id()", "request.jwt() ->> 'tenant'", "request.jwt() -> 'tenant'", "request.parameters() ->> 'x'",
			"request.parameter('x')", "request.parameter('$.o.k')", "token_parameters.x", "token_parameters.user_id", "user_parameters.x",
			"json_extract(request.jwt(), '$.tenant')", "request.jwt() ->> 'parameters.x'", "request.jwt() ->> 'sub'", g.literal())
	}
	sub := func() string { return g.reqExpr(depth - 1) }
	switch g.r.IntN(6) {
	case 0:
		return "(" + sub() + " " + g.pick("=", "!=", "<", ">=") + " " + sub() + ")"
	case 1:
		return "(" + sub() + " " + g.pick("||", "+", "*") + " " + sub() + ")"
	case 2:
		return "(" + sub() + g.pick(" IS NULL", " IS NOT NULL") + ")"
	case 3:
		return "(" + sub() + " IN " + g.pick("request.jwt() -> 'groups'", "request.parameters() -> 'arr'", "'[\"u1\",1]'") + ")"
	}
	return g.call(sub)
}

// reqCond is a request-only condition.
func (g *gen) reqCond() string {
	return g.pick("request.jwt() ->> 'role' = 'admin'", "request.parameters() ->> 'flag'", "NOT (request.jwt() ->> 'tenant' IS NULL)",
		"token_parameters.x = 1", "request.user_id() != 'u2'", "user_parameters.flag", g.reqExpr(2))
}

func (g *gen) jsonAny(depth int) string {
	switch g.r.IntN(9) {
	case 0:
		return "null"
	case 1:
		return g.pick("true", "false")
	case 2:
		return g.pick("1", "2", "-3", "1.5", "1.0", "9007199254740993", "1e2")
	case 3:
		if depth > 0 {
			return "[" + g.jsonAny(depth-1) + "," + g.jsonAny(depth-1) + "]"
		}
	case 4:
		if depth > 0 {
			return `{"k":` + g.jsonAny(depth-1) + "}"
		}
	}
	b, _ := json.Marshal(g.pick("u1", "u2", "t1", "l1", "", "admin", "1", "日本"))
	return string(b)
}

// request draws a JWT payload and client parameters. Every claim may be
// missing, null or of any JSON type.
func (g *gen) request() refRequest {
	var claims []string
	claims = append(claims, `"sub":`+g.pick(`"u1"`, `"u1"`, `"u2"`, `"1"`, `""`))
	if !g.chance(0.3) {
		claims = append(claims, `"tenant":`+g.jsonAny(1))
	}
	if g.chance(0.4) {
		claims = append(claims, `"role":`+g.pick(`"admin"`, `"user"`, `null`))
	}
	if g.chance(0.5) {
		claims = append(claims, `"groups":`+g.pick(`["u1","t1"]`, `[1,2.5,null]`, `[]`, `"u1"`, `null`, `[{"a":1},true]`))
	}
	if g.chance(0.4) {
		claims = append(claims, `"parameters":{"x":`+g.jsonAny(1)+`}`)
	}
	if g.chance(0.3) {
		claims = append(claims, `"iat":1700000000,"exp":1700003600`)
	}
	g.r.Shuffle(len(claims)-1, func(i, j int) { claims[i+1], claims[j+1] = claims[j+1], claims[i+1] })
	var params []string
	if g.chance(0.6) {
		params = append(params, `"x":`+g.jsonAny(1))
	}
	if g.chance(0.4) {
		params = append(params, `"flag":`+g.pick("true", "false", "1", `"yes"`, "null"))
	}
	if g.chance(0.5) {
		params = append(params, `"arr":`+g.pick(`["l1","l2"]`, `["l1",null]`, `[1,2.0]`, `[]`, `"l1"`, `null`, `[["l1"]]`))
	}
	if g.chance(0.2) {
		params = append(params, `"o":{"k":`+g.jsonAny(0)+`}`)
	}
	return refRequest{Claims: "{" + strings.Join(claims, ",") + "}", Params: "{" + strings.Join(params, ",") + "}"}
}

func (g *gen) requests(n int) []refRequest {
	out := make([]refRequest, n)
	for i := range out {
		out[i] = g.request()
	}
	return out
}

// bucketParamCase: data queries matching rows against bucket parameters
// (=, IN, AND/OR combinations) under a static parameter query.
func (g *gen) bucketParamCase() refCase {
	two := g.chance(0.3)
	param := "SELECT " + g.pick("request.user_id()", "request.jwt() ->> 'tenant'", "token_parameters.user_id") + " AS p"
	var data []string
	if two {
		param += ", " + g.pick("request.jwt() ->> 'tenant'", "request.parameters() ->> 'x'", "'u1'") + " AS q"
		data = []string{
			"SELECT * FROM items WHERE c0 = bucket.p AND c1 = bucket.q",
			"SELECT id, c2 FROM items WHERE (c0 = bucket.p OR c1 = bucket.p) AND bucket.q IN arr",
		}
	} else {
		data = []string{
			"SELECT * FROM items WHERE " + g.pick("c0 = bucket.p", "bucket.p = c1", "items.c0 = bucket.p", "bucket.p IN arr",
				"c0 = bucket.p AND "+g.rowExpr(1), "(c0 = bucket.p OR c1 = bucket.p)", "bucket.p IN c2 OR c0 = bucket.p",
				"upper(c0) = bucket.p", "CAST(c1 AS text) = bucket.p"),
			"SELECT id, " + g.rowExpr(2) + " AS v FROM items WHERE c1 = bucket.p",
		}
	}
	d := bucketDef{name: "bp", params: []string{param}, data: data}
	if g.chance(0.3) {
		d.extra = "    accept_potentially_dangerous_queries: true\n"
	}
	rules := renderRules(d)
	return refCase{Rules: rules, Rows: g.itemsRows(4), Requests: g.requests(3)}
}

// staticCase: parameter queries without FROM, NULL results included.
func (g *gen) staticCase() refCase {
	n := 1 + g.r.IntN(3)
	two := g.chance(0.3)
	var params []string
	for i := 0; i < n; i++ {
		q := "SELECT " + g.reqExpr(2) + " AS tenant"
		if two {
			q += ", " + g.reqExpr(1) + " AS other"
		}
		if g.chance(0.25) {
			q += ", " + g.pick("0", "1", "2") + " AS _priority"
		}
		if g.chance(0.4) {
			q += " WHERE " + g.reqCond()
		}
		params = append(params, q)
	}
	data := []string{"SELECT * FROM items WHERE c0 = bucket.tenant"}
	if two {
		data = []string{"SELECT * FROM items WHERE c0 = bucket.tenant AND c1 = bucket.other"}
	}
	d := bucketDef{name: "tenant_items", params: params, list: n > 1 || g.chance(0.3), data: data}
	if g.chance(0.5) {
		d.extra = "    accept_potentially_dangerous_queries: true\n"
	}
	defs := []bucketDef{d}
	if g.chance(0.4) {
		defs = append(defs, bucketDef{name: "global", data: []string{"SELECT id FROM items"}, priority: g.pick("", "1")})
	}
	return refCase{Rules: renderRules(defs...), Rows: g.itemsRows(2), Requests: g.requests(4)}
}

// listsRow is a row of a parameter table.
func (g *gen) listsRow() refRow {
	return refRow{Table: "lists", Row: [][3]string{
		col("id", g.matchValue()),
		col("owner", g.matchValue()),
		col("tenant", g.matchValue()),
		col("tags", [2]string{"t", g.pick(`["u1","t1"]`, `["t1",null]`, `[1,2.0]`, `[]`, `not json`)}),
		col("archived", [2]string{"i", g.pick("0", "1")}),
	}}
}

// tableParamCase: parameter queries over a table, evaluated into lookups
// at replication time and resolved at request time.
func (g *gen) tableParamCase() refCase {
	where := g.pick(
		"owner = request.user_id()", "lists.owner = request.user_id()", "owner = request.jwt() ->> 'tenant'",
		"id IN request.parameters() -> 'arr'", "owner IN request.jwt() -> 'groups'", "request.jwt() ->> 'tenant' IN tags",
		"owner = request.user_id() AND request.jwt() ->> 'role' = 'admin'", "owner = request.user_id() AND archived = 0",
		"owner = request.user_id() OR tenant = request.user_id()", "owner = token_parameters.user_id AND tenant = token_parameters.x",
		"upper(owner) = upper(request.user_id())", "owner = request.parameters() ->> 'x'", "tenant = user_parameters.x",
		"owner = request.user_id() AND NOT archived", "request.user_id() = owner AND id IN request.parameters() -> 'arr'")
	sel := g.pick("id AS p", "lists.id AS p", "tenant AS p", "owner AS p", "id AS p, 2 AS _priority")
	two := g.chance(0.25)
	if two {
		sel = g.pick("id AS p, request.user_id() AS q", "id AS p, tenant AS q", "id AS p, request.jwt() ->> 'tenant' AS q")
	}
	params := []string{"SELECT " + sel + " FROM lists WHERE " + where}
	if g.chance(0.3) {
		other := "SELECT id AS p FROM lists WHERE tenant = request.jwt() ->> 'tenant'"
		if two {
			other = "SELECT id AS p, owner AS q FROM lists WHERE tenant = request.jwt() ->> 'tenant'"
		}
		params = append(params, other)
	}
	data := []string{"SELECT * FROM items WHERE c0 = bucket.p"}
	if two {
		data = []string{"SELECT * FROM items WHERE c0 = bucket.p AND c1 = bucket.q"}
	}
	if g.chance(0.3) {
		data = append(data, "SELECT id, c3 AS v FROM items WHERE bucket.p IN arr"+map[bool]string{true: " AND c1 = bucket.q"}[two])
	}
	d := bucketDef{name: "by_list", params: params, list: len(params) > 1, data: data}
	if g.chance(0.4) {
		d.extra = "    accept_potentially_dangerous_queries: true\n"
	}
	var rows []refRow
	for i := 0; i < 4; i++ {
		rows = append(rows, g.listsRow())
	}
	rows = append(rows, g.itemsRows(3)...)
	return refCase{Rules: renderRules(d), Rows: rows, Requests: g.requests(4)}
}

// jsonEachCase: json_each parameter queries over request arrays.
func (g *gen) jsonEachCase() refCase {
	src := g.pick("request.jwt() -> 'groups'", "request.parameters() -> 'arr'", "request.jwt() -> 'tenant'", "token_parameters.x",
		"'[\"u1\",1,null,2.5]'", "request.parameters() ->> 'arr'")
	sel := g.pick("value AS p", "json_each.value AS p", "key AS p", "upper(value) AS p", "value || '' AS p", "e.value AS p")
	from := "json_each(" + src + ")"
	if strings.HasPrefix(sel, "e.") {
		from += " AS e"
	}
	q := "SELECT " + sel + " FROM " + from
	if g.chance(0.4) {
		q += " WHERE " + g.pick("value != 'x'", "value IS NOT NULL", "typeof(value) = 'text'", "request.jwt() ->> 'role' = 'admin'", "key > 0")
	}
	d := bucketDef{name: "groups", params: []string{q}, data: []string{"SELECT * FROM items WHERE c0 = bucket.p"}}
	if g.chance(0.5) {
		d.extra = "    accept_potentially_dangerous_queries: true\n"
	}
	return refCase{Rules: renderRules(d), Rows: g.itemsRows(2), Requests: g.requests(4)}
}

// badQueries are queries either engine may reject; each is placed among
// valid ones so that errors must land on the right line.
var badDataQueries = []string{
	"SELECT id FROM items JOIN lists ON items.c0 = lists.id",
	"SELECT count(*) AS n, id FROM items",
	"SELECT nofn(c0) AS v, id FROM items",
	"SELECT c0 FROM items",
	"SELECT * FROM items WHERE c0 = bucket.nope",
	"SELECT id, c0 + 1 FROM items",
	"SELECT * FROM items WHERE c0 = request.user_id()",
	"SELECT * FROM items GROUP BY c0",
	"SELECT * FROM items ORDER BY c0",
	"SELECT * FROM items LIMIT 1",
	"SELECT * FROM items WHERE c0 IN (SELECT id FROM lists)",
	"SELECT * FROM items; SELECT * FROM lists",
	"DELETE FROM items",
	"SELECT id, CAST(c0 AS varchar) AS v FROM items",
	"SELECT id, c0 AS v FROM items WHERE c0 LIKE 'a%'",
	"SELECT Id, C0 FROM items",
	"SELECT * FROM Items",
	"SELECT id FROM",
	"SELECT id, c0 ->> c1 AS v FROM items",
	"SELECT DISTINCT id FROM items",
	"SELECT id, c0 AS v FROM items WHERE c0 BETWEEN 1 AND 2",
	"SELECT id, -c0 AS v FROM items",
	"SELECT id, 1/0 AS v FROM items",
	"SELECT id, c0::text AS v FROM items",
	"SELECT id, json_each(c0) AS v FROM items",
	"SELECT id, c0 && arr AS v FROM items",
	"SELECT id FROM other.items",
	"SELECT id, lists.c0 AS v FROM items",
	"SELECT id, x.y.z AS v FROM items",
	"SELECT id, 'a' AS id FROM items",
	"SELECT *, * FROM items",
	"SELECT id FROM items WHERE c0 = (1, 2)",
	"SELECT id, c0 IS 1 AS v FROM items",
	"SELECT id, CASE WHEN c0 THEN 1 END AS v FROM items",
}

var badParamQueries = []string{
	"SELECT request.user_id() AS p FROM lists AS l WHERE l.owner = request.user_id()",
	"SELECT id AS p FROM lists WHERE id IN request.parameters() -> 'a' AND tenant IN request.jwt() -> 'b'",
	"SELECT id AS p, owner || request.user_id() AS q FROM lists WHERE owner = request.user_id()",
	"SELECT * FROM lists WHERE owner = request.user_id()",
	"SELECT id AS p FROM lists WHERE owner = request.user_id() OR tenant = request.jwt() ->> 'tenant'",
	"SELECT request.parameters() ->> 'x' AS p",
	"SELECT user_parameters.x AS p",
	"SELECT request.user_id() AS p WHERE c0 = 1",
	"SELECT request.nope() AS p",
	"SELECT request.user_id AS p",
	"SELECT request.user_id() AS p, 5 AS _priority",
	"SELECT request.user_id() AS p, 1 AS _priority, 2 AS _priority",
	"SELECT id AS p FROM lists WHERE owner = bucket.x",
	"SELECT value AS p FROM json_tree(request.jwt())",
	"SELECT request.user_id() AS P",
	"SELECT id AS p FROM lists WHERE owner = request.user_id() AND request.parameters() ->> 'flag'",
	"SELECT request.user_id()",
	"SELECT id AS p FROM lists WHERE upper(owner) IN request.jwt() -> 'groups'",
	"SELECT id AS p FROM lists WHERE owner = request.user_id() AND owner = request.jwt() ->> 'tenant'",
	"SELECT request.user_id() AS p FROM json_each(request.jwt() -> 'g') AS a, lists",
}

// rejectedCase: definitions with a bad query (or a bad definition key)
// between valid ones.
func (g *gen) rejectedCase() refCase {
	good := bucketDef{name: "fine", data: []string{"SELECT * FROM items"}}
	bad := bucketDef{name: "broken", params: []string{"SELECT request.user_id() AS p"}, data: []string{"SELECT * FROM items WHERE c0 = bucket.p"}}
	switch g.r.IntN(6) {
	case 0, 1, 2:
		q := badDataQueries[g.r.IntN(len(badDataQueries))]
		if strings.Contains(q, "bucket.") {
			bad.data = append(bad.data, q)
		} else {
			good.data = append(good.data, q)
		}
	case 3, 4:
		bad.params = []string{badParamQueries[g.r.IntN(len(badParamQueries))]}
		bad.list = g.chance(0.3)
	default:
		switch g.r.IntN(6) {
		case 0:
			bad.priority = g.pick("5", "-1", "'x'", "1.5")
		case 1:
			bad.params = []string{"SELECT request.user_id() AS p", "SELECT request.user_id() AS p WHERE request.jwt() ->> 'role' = 'admin'"}
			bad.list = true
		case 2:
			bad.params = []string{"SELECT request.user_id() AS p", "SELECT request.jwt() ->> 'tenant' AS q"}
		case 3:
			bad.params = []string{"SELECT request.user_id() AS p", "SELECT id AS p FROM lists WHERE owner = request.user_id()"}
			bad.list = true
		case 4:
			bad.params = []string{"SELECT request.user_id() AS p, 1 AS _priority"}
			bad.priority = "2"
		default:
			bad.data = []string{"SELECT * FROM items WHERE c0 = bucket.p", "SELECT id FROM items"}
		}
	}
	defs := []bucketDef{good, bad}
	if g.chance(0.5) {
		defs = []bucketDef{bad, good}
	}
	return refCase{Rules: renderRules(defs...)}
}

// schemaCase: rules checked against a source schema that lacks some of the
// tables and columns they name.
func (g *gen) schemaCase() refCase {
	itemsCols := []string{"id", "c0", "c1", "arr"}
	if g.chance(0.3) {
		itemsCols = itemsCols[1:] // no id column
	}
	schema := []refTable{{Table: "items", Columns: itemsCols}}
	if g.chance(0.6) {
		schema = append(schema, refTable{Table: "lists", Columns: []string{"id", "owner"}})
	}
	first := g.pick("SELECT * FROM items", "SELECT id, c0 FROM items", "SELECT id, nosuchcol FROM items", "SELECT id, c0, c9 AS x FROM items",
		"SELECT id, upper(missing) AS u FROM items", "SELECT it.id, it.c5 FROM items AS it") + " WHERE c1 = bucket.p"
	data := []string{first, "SELECT * FROM " + g.pick("items", "nosuchtable", "lists") + " WHERE " + g.pick("c0 = bucket.p", "c7 = bucket.p", "owner = bucket.p")}
	params := []string{g.pick("SELECT id AS p FROM lists WHERE owner = request.user_id()", "SELECT id AS p FROM lists WHERE nope = request.user_id()",
		"SELECT missing AS p FROM lists WHERE owner = request.user_id()", "SELECT request.user_id() AS p", "SELECT id AS p FROM gone WHERE owner = request.user_id()")}
	return refCase{Rules: renderRules(bucketDef{name: "s", params: params, data: data}), Schema: schema}
}
