package syncrules

import (
	"math"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

func TestLiteralsAndColumns(t *testing.T) {
	cols := []string{"i", "f", "s", "n", "b"}
	row := []model.Value{model.Int(7), model.Real(2.5), model.Text("x"), model.Null(), model.Blob([]byte{1, 2})}
	runExprCases(t, []exprCase{
		{expr: "1", want: model.Int(1)},
		{expr: "1.5", want: model.Real(1.5)},
		{expr: "1e3", err: errAny}, // no exponent notation in PowerSync's SQL
		{expr: "'it''s'", want: model.Text("it's")},
		{expr: "NULL", want: model.Null()},
		{expr: "TRUE", want: model.Int(1)},
		{expr: "false", want: model.Int(0)},
		{expr: "-3", want: model.Int(-3)},
		{expr: "99999999999999999999", want: model.Real(1e20)},
		{expr: "i", want: model.Int(7)},
		{expr: "t.f", want: model.Real(2.5)},
		{expr: `"s"`, want: model.Text("x")},
		{expr: "n", want: model.Null()},
		{expr: "b", want: model.Blob([]byte{1, 2})},
		{expr: "missing", want: model.Null()},
		{expr: "I", want: model.Int(7)}, // unquoted identifiers are lower-cased
	}, cols, row)
}

func TestComparisons(t *testing.T) {
	cols := []string{"b1", "b2", "big"}
	row := []model.Value{model.Blob([]byte("a")), model.Blob([]byte("a")), model.Int(9007199254740993)}
	runExprCases(t, []exprCase{
		{expr: "1 = 1", want: model.Int(1)},
		{expr: "1 = 1.0", want: model.Int(1)},
		{expr: "1 == 1", err: errAny},
		{expr: "2 <> 1", want: model.Int(1)},
		{expr: "2 != 2", want: model.Int(0)},
		{expr: "1 < 2", want: model.Int(1)},
		{expr: "2 <= 2", want: model.Int(1)},
		{expr: "3 > 2.5", want: model.Int(1)},
		{expr: "2 >= 3", want: model.Int(0)},
		{expr: "'a' < 'b'", want: model.Int(1)},
		{expr: "'a' = 'A'", want: model.Int(0)},
		{expr: "'1' = 1", want: model.Int(0)}, // no type affinity: text vs number
		{expr: "1 < 'a'", want: model.Int(1)}, // numbers sort before text
		{expr: "NULL = NULL", want: model.Null()},
		{expr: "1 = NULL", want: model.Null()},
		{expr: "NULL < 1", want: model.Null()},
		{expr: "9007199254740993 > 9007199254740992.0", want: model.Int(0)}, // the literal is read through a JavaScript number
		{expr: "big > 9007199254740992.0", want: model.Int(1)},              // exact int/float comparison
		{expr: "'😀' < 'ｚ'", want: model.Int(1)},                             // UTF-16 code unit order
		{expr: "'abc' < 'abd'", want: model.Int(1)},
		{expr: "'ab' < 'abc'", want: model.Int(1)},
		{expr: "b1 = b2", err: ErrCompareBlobs},
		{expr: "b1 > 'z'", want: model.Int(1)}, // blobs sort after text
	}, cols, row)
}

func TestArithmetic(t *testing.T) {
	cols := []string{"z", "big"}
	row := []model.Value{model.Int(0), model.Int(math.MaxInt64)}
	runExprCases(t, []exprCase{
		{expr: "1 + 2", want: model.Int(3)},
		{expr: "1 + 2.5", want: model.Real(3.5)},
		{expr: "5 - 7", want: model.Int(-2)},
		{expr: "3 * 4", want: model.Int(12)},
		{expr: "7 / 2", want: model.Int(3)},
		{expr: "-7 / 2", want: model.Int(-3)},
		{expr: "7.0 / 2", want: model.Real(3.5)},
		{expr: "1 / z", want: model.Null()},
		{expr: "1.0 / z", want: model.Null()},
		{expr: "'3' + 4", want: model.Int(7)},
		{expr: "'3.5' + 1", want: model.Real(4.5)},
		{expr: "' 12abc' * 2", want: model.Int(24)},
		{expr: "'abc' + 1", want: model.Int(1)},
		{expr: "'-5' + 0", want: model.Int(-5)},
		{expr: "NULL + 1", want: model.Null()},
		{expr: "1 - NULL", want: model.Null()},
		{expr: "big + 1", want: model.Real(9.223372036854775807e18 + 1)},
		{expr: "1 + 2 * 3", want: model.Int(7)},
		{expr: "(1 + 2) * 3", want: model.Int(9)},
		{expr: "- (2 + 3)", err: errAny}, // a sign belongs to a number literal only
		{expr: "1 % 2", err: errAny},
	}, cols, row)
}

func TestConcatAndText(t *testing.T) {
	runExprCases(t, []exprCase{
		{expr: "'a' || 'b'", want: model.Text("ab")},
		{expr: "1 || 2", want: model.Text("12")},
		{expr: "1.0 || ''", want: model.Text("1")},
		{expr: "0.1 || ''", want: model.Text("0.1")},
		{expr: "CAST('1e21' AS real) || ''", want: model.Text("1e+21")},
		{expr: "(0.1 + 0.2) || ''", want: model.Text("0.30000000000000004")},
		{expr: "NULL || 'a'", want: model.Null()},
		{expr: "'a' || 1 + 2", want: model.Text("a3")}, // + binds tighter than ||
	}, nil, nil)
}

func TestLogic(t *testing.T) {
	runExprCases(t, []exprCase{
		{expr: "1 AND 0", want: model.Int(0)},
		{expr: "1 AND 2", want: model.Int(1)},
		{expr: "NULL AND 1", want: model.Int(0)}, // two-valued: NULL is false
		{expr: "NULL OR 1", want: model.Int(1)},
		{expr: "NULL OR 0", want: model.Int(0)},
		{expr: "NOT NULL", want: model.Int(1)},
		{expr: "NOT 0", want: model.Int(1)},
		{expr: "NOT 0.5", want: model.Int(0)},
		{expr: "NOT 'abc'", want: model.Int(1)},
		{expr: "NOT '12abc'", want: model.Int(0)},
		{expr: "NOT '0.5'", want: model.Int(1)}, // parseInt('0.5') is 0
		{expr: "NOT ' 0x1f'", want: model.Int(0)},
		{expr: "NOT 1 = 2", want: model.Int(1)}, // NOT binds looser than =
		{expr: "1 OR 0 AND 0", want: model.Int(1)},
		{expr: "NULL IS NULL", want: model.Int(1)},
		{expr: "1 IS NULL", want: model.Int(0)},
		{expr: "1 IS NOT NULL", want: model.Int(1)},
		{expr: "'' IS NOT NULL", want: model.Int(1)},
		{expr: "1 = 2 IS NULL", want: model.Int(0)},
		{expr: "1 IS 1", err: errAny},
	}, nil, nil)
}

func TestInOperator(t *testing.T) {
	cols := []string{"arr", "i", "r", "s"}
	row := []model.Value{model.Text(`["a", 1, 1.5, null]`), model.Int(1), model.Real(1.5), model.Text("a")}
	runExprCases(t, []exprCase{
		{expr: "s IN arr", want: model.Int(1)},
		{expr: "'b' IN arr", want: model.Int(0)},
		{expr: "r IN arr", want: model.Int(1)},
		{expr: "i IN arr", want: model.Int(1)}, // numbers compare by value
		{expr: "NULL IN arr", want: model.Null()},
		{expr: "s IN NULL", want: model.Null()},
		{expr: "s IN 'nope'", err: errAny},
		{expr: "s IN '{\"a\":1}'", err: ErrNotJSONArray},
		{expr: "s IN i", err: ErrNotJSONArray},
		{expr: "s IN ('a', 'b')", err: errAny},
		{expr: "s NOT IN arr", err: errAny},
	}, cols, row)
}

func TestJSONOperators(t *testing.T) {
	cols := []string{"j"}
	row := []model.Value{model.Text(`{"a":{"b":1,"c":"x"},"n":null,"t":true,"f":1.0,"arr":[10,20],"big":12345678901234567890,"s":"str"}`)}
	runExprCases(t, []exprCase{
		{expr: "j -> 'a'", want: model.Text(`{"b":1,"c":"x"}`)},
		{expr: "j ->> 'a'", want: model.Text(`{"b":1,"c":"x"}`)},
		{expr: "j ->> 'a.b'", want: model.Int(1)}, // edition 1: 'a.b' is a path
		{expr: "j -> 'a.c'", want: model.Text(`"x"`)},
		{expr: "j ->> 'a.c'", want: model.Text("x")},
		{expr: "j ->> '$.a.c'", want: model.Text("x")},
		{expr: "j ->> 'n'", want: model.Text("null")}, // edition 1 quirk: JSON null is the text 'null'
		{expr: "j -> 'n'", want: model.Null()},
		{expr: "j ->> 'missing'", want: model.Null()},
		{expr: "j -> 'missing.deeper'", want: model.Null()},
		{expr: "j ->> 't'", want: model.Int(1)},
		{expr: "j ->> 'f'", want: model.Real(1)},
		{expr: "j -> 'f'", want: model.Text("1.0")},
		{expr: "j ->> 'arr.1'", want: model.Int(20)},
		{expr: "j ->> 'arr.length'", want: model.Real(2)}, // a JavaScript number
		{expr: "j -> 'big'", want: model.Text("12345678901234567890")},
		{expr: "j ->> 's.0'", want: model.Text("s")},
		{expr: "j -> 'a' ->> 'b'", want: model.Int(1)},
		{expr: "NULL ->> 'a'", want: model.Null()},
		{expr: "'not json' ->> 'a'", err: errAny},
		{expr: "j -> 1", err: errAny},
		{expr: "j -> 'a' = '{\"b\":1,\"c\":\"x\"}'", want: model.Int(1)},
	}, cols, row)
}

func TestCast(t *testing.T) {
	cols := []string{"inf"}
	row := []model.Value{model.Real(math.Inf(1))}
	runExprCases(t, []exprCase{
		{expr: "CAST('12abc' AS integer)", want: model.Int(12)},
		{expr: "CAST('-5' AS integer)", want: model.Int(-5)},
		{expr: "CAST(1.7 AS integer)", want: model.Int(1)},
		{expr: "CAST(-1.5 AS integer)", want: model.Int(-2)}, // floor, as PowerSync
		{expr: "CAST(inf AS integer)", err: ErrNotNumber},
		{expr: "CAST(3 AS text)", want: model.Text("3")},
		{expr: "CAST(3.0 AS text)", want: model.Text("3")},
		{expr: "CAST('1.5e3' AS real)", want: model.Real(1500)},
		{expr: "CAST('abc' AS real)", want: model.Real(0)},
		{expr: "CAST(' -2.5x' AS real)", want: model.Real(-2.5)},
		{expr: "CAST(2 AS real)", want: model.Real(2)},
		{expr: "CAST('2.5' AS numeric)", want: model.Real(2.5)},
		{expr: "CAST('7' AS numeric)", want: model.Int(7)},
		{expr: "CAST('x' AS numeric)", want: model.Int(0)},
		{expr: "CAST('hi' AS blob)", want: model.Blob([]byte("hi"))},
		{expr: "CAST(NULL AS text)", want: model.Null()},
		{expr: "12::text", want: model.Text("12")},
		{expr: "CAST(1 AS varchar)", err: errAny},
	}, cols, row)
}

func TestFunctions(t *testing.T) {
	cols := []string{"bl", "badbl"}
	row := []model.Value{model.Blob([]byte("hey")), model.Blob([]byte{0xff, 'a'})}
	runExprCases(t, []exprCase{
		{expr: "upper('abc')", want: model.Text("ABC")},
		{expr: "upper(NULL)", want: model.Null()},
		{expr: "upper(1.5)", want: model.Text("1.5")},
		{expr: "lower('ÀB')", want: model.Text("àb")},
		{expr: "substring('hello', 2)", want: model.Text("ello")},
		{expr: "substring('hello', 2, 3)", want: model.Text("ell")},
		{expr: "substring('hello', 0, 2)", want: model.Text("h")},
		{expr: "substring('hello', -3)", want: model.Text("llo")},
		{expr: "substring('hello', -3, 2)", want: model.Text("ll")},
		{expr: "substring('hello', 3, -2)", want: model.Text("he")},
		{expr: "substring('hello', 10)", want: model.Text("")},
		{expr: "substring('hello', NULL)", want: model.Null()},
		{expr: "substring('hello', 1, NULL)", want: model.Null()},
		{expr: "substring('😀ab', 3)", want: model.Text("ab")},
		{expr: "substring(12345, 2, 2)", want: model.Text("23")},
		{expr: "length('héllo')", want: model.Int(5)},
		{expr: "length('😀')", want: model.Int(2)},
		{expr: "length(123)", want: model.Int(3)},
		{expr: "length(NULL)", want: model.Null()},
		{expr: "length(bl)", want: model.Int(3)},
		{expr: "hex('ab')", want: model.Text("6162")},
		{expr: "hex(10)", want: model.Text("3130")},
		{expr: "hex(NULL)", want: model.Text("")},
		{expr: "hex(bl)", want: model.Text("686579")},
		{expr: "base64('hello')", want: model.Text("aGVsbG8=")},
		{expr: "base64(NULL)", want: model.Text("")},
		{expr: "typeof(1)", want: model.Text("integer")},
		{expr: "typeof(1.5)", want: model.Text("real")},
		{expr: "typeof('a')", want: model.Text("text")},
		{expr: "typeof(NULL)", want: model.Text("null")},
		{expr: "typeof(bl)", want: model.Text("blob")},
		{expr: "ifnull(NULL, 2)", want: model.Int(2)},
		{expr: "ifnull(1, 2)", want: model.Int(1)},
		{expr: "iif(1, 'y', 'n')", want: model.Text("y")},
		{expr: "iif(NULL, 'y', 'n')", want: model.Text("n")},
		{expr: "iif('0', 'y', 'n')", want: model.Text("n")},
		{expr: "json_extract('{\"a\":[1,2]}', '$.a')", want: model.Text("[1,2]")},
		{expr: "json_extract('{\"a\":{\"b\":\"c\"}}', '$.a.b')", want: model.Text("c")},
		{expr: "json_extract('{\"a\":1}', '$')", want: model.Text(`{"a":1}`)},
		{expr: "json_extract('{\"a\":1}', 'a')", err: ErrJSONPath},
		{expr: "json_extract(NULL, '$.a')", want: model.Null()},
		{expr: "json_array_length('[1,2,3]')", want: model.Int(3)},
		{expr: "json_array_length('{\"a\":1}')", want: model.Int(0)},
		{expr: "json_array_length('{\"a\":[1,2]}', '$.a')", want: model.Int(2)},
		{expr: "json_array_length(NULL)", want: model.Null()},
		{expr: "json_array_length('[')", err: errAny},
		{expr: "json_valid('{}')", want: model.Int(1)},
		{expr: "json_valid('{')", want: model.Int(0)},
		{expr: "json_valid(NULL)", want: model.Int(0)},
		{expr: "json_keys('{\"b\":1,\"a\":2,\"1\":3}')", want: model.Text(`["1","b","a"]`)},
		{expr: "json_keys('[1]')", err: errAny},
		{expr: "upper(badbl)", want: model.Text("\uFFFDA")},
		{expr: "nosuch(1)", err: errAny},
		{expr: "count(*)", err: errAny},
		{expr: "upper('a', 'b')", err: errAny},
	}, cols, row)
}

func TestJSNumberFormatting(t *testing.T) {
	cases := []struct {
		f         float64
		js, jbig  string
		plainJSON string
	}{
		{1, "1", "1.0", "1"},
		{-2, "-2", "-2.0", "-2"},
		{1.5, "1.5", "1.5", "1.5"},
		{0.1, "0.1", "0.1", "0.1"},
		{1e21, "1e+21", "1e+21", "1e+21"},
		{1e20, "100000000000000000000", "100000000000000000000.0", "100000000000000000000"},
		{1e-7, "1e-7", "1e-7", "1e-7"},
		{0.000001, "0.000001", "0.000001", "0.000001"},
		{123456789012345680000, "123456789012345680000", "123456789012345680000.0", "123456789012345680000"},
		{math.Copysign(0, -1), "0", "0.0", "0"},
		{5e-324, "5e-324", "5e-324", "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308", "1.7976931348623157e+308", "1.7976931348623157e+308"},
		{1.25e-5, "0.0000125", "0.0000125", "0.0000125"},
		{math.NaN(), "NaN", "NaN", "null"},
		{math.Inf(1), "Infinity", "Infinity", "null"},
		{math.Inf(-1), "-Infinity", "-Infinity", "null"},
	}
	for _, c := range cases {
		if got := string(model.AppendJSNumber(nil, c.f)); got != c.js {
			t.Errorf("toString(%v) = %s, want %s", c.f, got, c.js)
		}
		if got := string(appendJSONBigNumber(nil, c.f)); got != c.jbig {
			t.Errorf("JSONBig(%v) = %s, want %s", c.f, got, c.jbig)
		}
		if got := string(model.AppendJSONNumber(nil, c.f)); got != c.plainJSON {
			t.Errorf("JSON.stringify(%v) = %s, want %s", c.f, got, c.plainJSON)
		}
	}
}

func TestJSParsing(t *testing.T) {
	floats := map[string]float64{
		"  3.5abc": 3.5, ".5": 0.5, "5.": 5, "-Infinity": math.Inf(-1), "1e": 1, "+2": 2,
		"\u00a01": 1, "1e400": math.Inf(1), "-0.25e1x": -2.5,
	}
	for in, want := range floats {
		if got := jsParseFloat(in); got != want {
			t.Errorf("parseFloat(%q) = %v, want %v", in, got, want)
		}
	}
	for _, in := range []string{"", "e5", "abc", ".", "-"} {
		if got := jsParseFloat(in); !math.IsNaN(got) {
			t.Errorf("parseFloat(%q) = %v, want NaN", in, got)
		}
	}
	truthy := map[string]bool{"1": true, "0": false, "00": false, "007": true, "-1": true, " 2x": true,
		"x2": false, "0x0": false, "0x10": true, "0x": false, "": false, "0.9": false}
	for in, want := range truthy {
		if got := jsParseIntTruthy(in); got != want {
			t.Errorf("parseInt(%q) truthy = %v, want %v", in, got, want)
		}
	}
}
