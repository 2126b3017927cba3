package syncrules

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// FuzzParse feeds arbitrary text to the tokenizer, parser and compiler in
// every query mode. It must never panic; errors must carry a position
// inside the query.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"SELECT * FROM todos WHERE list_id = bucket.list_id",
		"SELECT id AS list_id FROM lists WHERE owner_id = request.user_id() AND id IN request.jwt() -> 'ids'",
		"SELECT value AS v FROM json_each(request.parameters() -> 'a') WHERE value != 'x'",
		"SELECT request.user_id() AS u WHERE request.jwt() ->> 'role' = 'admin'",
		"SELECT id, CAST(n AS text) AS t, upper(s) || '-' || substring(s, 2, -1) AS x FROM t AS u WHERE NOT (a IS NULL) OR b >= 1.5e3",
		"SELECT id FROM t WHERE bucket.x IN tags AND (c = 'a' OR d = bucket.x)",
		"SELECT \"Quoted\"\"Id\" AS id FROM \"T\" /* c */ -- x\n WHERE x::integer = 1;",
		"SELECT id FROM t WHERE x = 'unterminated",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if s, err := parseSelect(sql); err != nil {
			if err.pos < 0 || err.pos > len(sql) {
				t.Fatalf("error position %d outside query of length %d", err.pos, len(sql))
			}
		} else if s == nil {
			t.Fatal("nil statement without error")
		}
		def := &definition{name: "d", prefix: "1#d", globalID: "1#d[]", bucketParams: []string{"x"}}
		q := &dataQuery{queryBase: queryBase{def: def, label: "data[0]", sql: sql}}
		for _, e := range compileDataQuery(def, q, "public") {
			checkPos(t, sql, e)
			line, col := q.loc.at(sql, e.pos)
			if line < 0 || col < 0 {
				t.Fatalf("bad location %d:%d", line, col)
			}
		}
		_, errs := compileParamQuery(def, queryBase{def: def, label: "parameters", sql: sql}, "1", "public")
		for _, e := range errs {
			checkPos(t, sql, e)
		}
	})
}

func checkPos(t *testing.T, sql string, e *sqlError) {
	t.Helper()
	if e.pos < 0 || e.pos > len(sql) {
		t.Fatalf("error %q at %d outside query of length %d", e.msg, e.pos, len(sql))
	}
	if e.msg == "" {
		t.Fatal("empty error message")
	}
}

// FuzzEvaluate compiles fuzzed parameter and data queries and evaluates
// them on fuzzed rows and requests. Evaluation must never panic, must be
// deterministic, and every output must be well-formed.
func FuzzEvaluate(f *testing.F) {
	f.Add("SELECT id AS x FROM t WHERE a = request.user_id()", "SELECT *, a || b AS ab FROM t WHERE a = bucket.x",
		"a1", int64(7), 1.5, []byte{1, 2}, `{"sub":"u","tags":["a",1]}`, `{"p":[1,2]}`)
	f.Add("SELECT value AS x FROM json_each(request.jwt() -> 'tags')", "SELECT id, j ->> 'k.z' AS k FROM t WHERE bucket.x IN j",
		`["a",1,null]`, int64(-1), math.Copysign(0, -1), []byte("x"), `{"sub":"u","tags":["a",1]}`, `{}`)
	f.Add("SELECT request.parameter('p') AS x WHERE request.parameters() ->> 'on'", "SELECT id, CAST(c AS integer) / b AS q FROM t WHERE c > bucket.x OR d = bucket.x",
		"1e3", int64(0), 1e300, []byte{}, `{"sub":""}`, `{"p":"v","on":1}`)
	f.Add("SELECT b AS x FROM t WHERE a IN request.jwt() -> 'ids' AND request.jwt() ->> 'r' = 'admin'", "SELECT id, substring(a, b, c) AS s, hex(d) AS h, json_array_length(a) AS n FROM t WHERE b = bucket.x",
		`[1,2]`, int64(2), 3.0, []byte{0xff}, `{"sub":"u","ids":["[1,2]",2],"r":"admin"}`, `{}`)
	f.Fuzz(func(t *testing.T, psql, dsql, a string, b int64, c float64, d []byte, claims, params string) {
		def := &definition{name: "d", priority: 3, prefix: "1#d", globalID: "1#d[]"}
		pq, errs := compileParamQuery(def, queryBase{def: def, label: "parameters", sql: psql}, "1", "public")
		if len(errs) == 0 {
			def.hasParams = true
			switch q := pq.(type) {
			case *staticParamQuery:
				def.static, def.bucketParams = append(def.static, q), q.outNames
			case *funcParamQuery:
				def.funcs, def.bucketParams = append(def.funcs, q), q.outNames
			case *tableParamQuery:
				def.tables, def.bucketParams = append(def.tables, q), q.outNames
			}
			if duplicate(def.bucketParams) != "" {
				return
			}
		}
		dq := &dataQuery{queryBase: queryBase{def: def, label: "data[0]", sql: dsql}}
		if len(compileDataQuery(def, dq, "public")) == 0 {
			def.data = append(def.data, dq)
		}
		r := &Rules{opts: Options{GroupID: "1"}, defs: []*definition{def}}
		bt, err := r.Bind("t", []string{"id", "a", "b", "c", "d", "j", "_h"})
		if err != nil {
			t.Fatal(err)
		}
		row := []model.Value{model.Text(a), model.Text(a), model.Int(b), model.Real(c), model.Blob(d), model.Text(a), model.Null()}
		ev := bt.NewEvaluator()
		out1, _, err1 := ev.EvaluateRow(row, nil, nil)
		out2, _, err2 := ev.EvaluateRow(row, nil, nil)
		if (err1 == nil) != (err2 == nil) || len(out1) != len(out2) {
			t.Fatalf("non-deterministic: %v/%v %d/%d", err1, err2, len(out1), len(out2))
		}
		for i, o := range out1 {
			if o.Bucket != out2[i].Bucket || !bytes.Equal(o.Data, out2[i].Data) {
				t.Fatalf("non-deterministic output %d", i)
			}
			if !strings.HasPrefix(o.Bucket, "1#d[") || !strings.HasSuffix(o.Bucket, "]") {
				t.Fatalf("bad bucket id %q", o.Bucket)
			}
			if len(o.Data) < 2 || o.Data[0] != '{' || o.Data[len(o.Data)-1] != '}' {
				t.Fatalf("bad data %q", o.Data)
			}
		}
		entries, _, _ := ev.EvaluateParameterRow(row, nil, nil)
		for _, e := range entries {
			if !bytes.HasPrefix(e.Key, []byte(`["d","1"`)) || e.Rows[0] != '[' {
				t.Fatalf("bad lookup entry %s %s", e.Key, e.Rows)
			}
		}
		plan, err := r.Request(Request{UserID: a, Claims: []byte(claims), Parameters: []byte(params)})
		if err != nil && plan == nil {
			return
		}
		for _, l := range plan.Lookups {
			for _, e := range entries {
				if _, err := l.Buckets(e.Rows, nil); err != nil {
					t.Fatalf("stored rows %s rejected: %v", e.Rows, err)
				}
			}
			_, _ = l.Buckets([]byte(a), nil)
		}
	})
}

// FuzzStreamQuery compiles fuzzed Sync Streams queries (subqueries
// allowed) as a stream of an edition-3 file: no panic, errors inside the
// query, and what compiles evaluates rows and requests without failing.
func FuzzStreamQuery(f *testing.F) {
	for _, s := range []string{
		"SELECT * FROM todos WHERE list_id = subscription.parameter('list_id')",
		"SELECT * FROM todos WHERE list_id IN (SELECT id FROM lists WHERE owner_id = auth.user_id()) AND done = 0",
		"SELECT id, title AS name FROM docs AS d WHERE d.owner = auth.user_id() AND owner = auth.parameter('o')",
		"SELECT * FROM t WHERE a IN (SELECT (SELECT 1) FROM u WHERE b = connection.parameter('x'))",
		"SELECT * FROM t WHERE a = 1 OR b = auth.user_id()",
		"SELECT * FROM t WHERE a IN c OR b IN (SELECT x.a FROM c x)",
		"SELECT t.* FROM t JOIN u ON t.a = u.a AND u.b = auth.user_id() WHERE u.owner IS NOT NULL OR t.done = 1",
		"SELECT d.id FROM u, t d WHERE d.a = u.a AND d.b = u.owner AND u.b = subscription.parameter('b')",
		"SELECT t.* FROM t, c WHERE t.a = c.a",
		"SELECT * FROM t WHERE a IN (SELECT a FROM u WHERE b IN (SELECT a FROM c)) AND b IN (SELECT b FROM u WHERE a = auth.user_id())",
		"SELECT t.* FROM t, u, v WHERE t.a = u.a AND u.b = v.b AND v.a = auth.user_id()",
		"SELECT * FROM t WHERE a IN (SELECT a FROM u WHERE b = auth.user_id() OR owner = 1) AND a IN c AND b IN auth.parameter('o')",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if s, err := parseStreamSelect(sql); err != nil {
			checkPos(t, sql, err)
		} else if s == nil {
			t.Fatal("nil statement without error")
		}
		src := "config: {edition: 3}\nwith:\n  c: SELECT a FROM u WHERE b = auth.user_id()\nstreams:\n  s:\n    auto_subscribe: true\n    query: " + strconv.Quote(sql) + "\n"
		rules, err := Parse([]byte(src), Options{GroupID: "1"})
		if err != nil {
			return
		}
		for _, table := range rules.Tables() {
			bt, err := rules.Bind(table.Name, []string{"id", "a", "b", "list_id", "owner_id", "owner", "done"})
			if err != nil {
				t.Fatal(err)
			}
			row := []model.Value{model.Text("i"), model.Int(1), model.Null(), model.Text("l"), model.Text("u"), model.Real(2.5), model.Int(0)}
			ev := bt.NewEvaluator()
			if _, _, err := ev.EvaluateRow(row, nil, nil); err != nil && !errors.As(err, new(*EvalError)) {
				t.Fatal(err)
			}
			if _, _, err := ev.EvaluateParameterRow(row, nil, nil); err != nil && !errors.As(err, new(*EvalError)) {
				t.Fatal(err)
			}
		}
		plan, err := rules.Request(Request{UserID: "u", Claims: []byte(`{"sub":"u","o":"u"}`),
			Streams: &StreamsRequest{IncludeDefaults: true, Subscriptions: []StreamSubscription{{Stream: "s", Parameters: []byte(`{"list_id":"l"}`), OverridePriority: -1}}}})
		if err != nil {
			t.Fatal(err)
		}
		// Staged lookups find a row under every key.
		if _, _, err := plan.ResolveStaged(func(keys [][]byte) ([][][]byte, error) {
			sets := make([][][]byte, len(keys))
			for i := range sets {
				sets[i] = [][]byte{[]byte(`[{"0":"l","1":2.5}]`)}
			}
			return sets, nil
		}, nil); err != nil {
			t.Fatal(err)
		}
	})
}
