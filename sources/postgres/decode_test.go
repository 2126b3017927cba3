package postgres

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

func TestJSNumber(t *testing.T) {
	cases := map[float64]string{
		0: "0", math.Copysign(0, -1): "0", 1: "1", -1.5: "-1.5", 0.1: "0.1", 1.1: "1.1",
		123456789012345680000: "123456789012345680000", 1e21: "1e+21", 1.5e21: "1.5e+21",
		1e-6: "0.000001", 1.5e-7: "1.5e-7", 1e-7: "1e-7", 1e300: "1e+300", 5e-324: "5e-324",
		math.MaxFloat64: "1.7976931348623157e+308", 100: "100", 0.000123: "0.000123",
		math.NaN(): "null", math.Inf(1): "null", math.Inf(-1): "null",
	}
	for f, want := range cases {
		if got := string(model.AppendJSONNumber(nil, f)); got != want {
			t.Errorf("model.AppendJSONNumber(%v) = %s, want %s", f, got, want)
		}
	}
}

func TestJSString(t *testing.T) {
	cases := map[string]string{
		``:                   `""`,
		`plain`:              `"plain"`,
		`a"b\c`:              `"a\"b\\c"`,
		"\n\r\t\b\f\x01\x1f": `"\n\r\t\b\f\u0001\u001f"`,
		"é<>&\u2028\x7f":     "\"é<>&\u2028\x7f\"",
		"bad\xffutf8":        "\"bad\ufffdutf8\"",
	}
	for in, want := range cases {
		if got := string(model.AppendJSONString(nil, []byte(in))); got != want {
			t.Errorf("model.AppendJSONString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestTimestamptzText(t *testing.T) {
	cases := map[string]string{
		"2026-01-01 09:00:00+00":        "2026-01-01 09:00:00Z",
		"2026-01-01 09:00:00.5+00":      "2026-01-01 09:00:00.5Z",
		"2026-01-01 09:00:00.123456+00": "2026-01-01 09:00:00.123456Z",
		"2026-01-01 09:00:00.000001+00": "2026-01-01 09:00:00.000001Z",
		"2026-01-01 05:30:00+05:30":     "2026-01-01 00:00:00Z",
		"2025-12-31 20:30:00-03:30":     "2026-01-01 00:00:00Z",
		"1900-01-01 00:19:32+00:19:32":  "1900-01-01 00:00:00Z",
		"1969-12-31 23:59:59.999999+00": "1969-12-31 23:59:59.999999Z",
		"0001-01-01 00:00:00+00":        "0001-01-01 00:00:00Z",
		"2026-01-01T09:00:00Z":          "2026-01-01 09:00:00Z",
		"infinity":                      "9999-12-31 23:59:59Z",
		"-infinity":                     "0000-01-01 00:00:00Z",
		"0044-03-15 10:00:00+00 BC":     "NULL",
		"10000-01-01 00:00:00+00":       "NULL",
		"9999-12-31 23:59:59.999999+00": "9999-12-31 23:59:59.999999Z",
		"9999-12-31 23:00:00-01":        "NULL",
		"0001-01-01 00:30:00+01":        "NULL",
	}
	col := Column{Name: "ts", TypeOID: oidTimestamptz}
	for in, want := range cases {
		v, err := DecodeText(col, []byte(in))
		if (err != nil) != (want == "ERROR") {
			t.Errorf("%q: %v", in, err)
			continue
		}
		got := v.Str()
		if err != nil {
			got = "ERROR"
		}
		if v.IsNull() {
			got = "NULL"
		}
		if got != want {
			t.Errorf("DecodeText(%q) = %s, want %s", in, got, want)
		}
	}
	for _, bad := range []string{"", "2026-01-01", "2026-13-01 00:00:00+00", "2026-01-01 00:00:00.1234567+00", "2026-01-01 00:00:00+00 AD", "x"} {
		if _, err := DecodeText(col, []byte(bad)); err == nil {
			t.Errorf("DecodeText(%q) succeeded, want error", bad)
		}
	}
}

func TestTimestamptzBinaryMatchesText(t *testing.T) {
	col := Column{Name: "ts", TypeOID: oidTimestamptz}
	for _, pg := range []int64{0, 1, -1, 500000, -946684800000000, 123456789012345, math.MaxInt64, math.MinInt64, -63082281600000000, pgMaxMicros + 1} {
		var raw [8]byte
		binary.BigEndian.PutUint64(raw[:], uint64(pg))
		bin, err := decodeBinary(col, raw[:])
		if err != nil {
			t.Fatal(err)
		}
		key := string(appendKeyText(nil, codecTimestamptz, raw[:]))
		if pg == pgMaxMicros+1 {
			if !bin.IsNull() {
				t.Errorf("out-of-range %d = %v, want NULL", pg, bin)
			}
			continue
		}
		// The key text is Postgres input text; decoding it as stream text
		// must give the same value as the binary path.
		txt, err := DecodeText(col, []byte(key))
		if err != nil {
			t.Fatalf("%d: key %q: %v", pg, key, err)
		}
		if !bin.Equal(txt) {
			t.Errorf("%d: binary %v, text(%q) %v", pg, bin, key, txt)
		}
	}
}

func TestArrayJSON(t *testing.T) {
	cases := []struct {
		elem uint32
		in   string
		want string
	}{
		{oidInt4, `{}`, `[]`},
		{oidInt4, `{1,-2,NULL}`, `[1,-2,null]`},
		{oidInt4, `[0:1]={1,2}`, `[1,2]`},
		{oidInt4, `{{1,2},{3,4}}`, `[[1,2],[3,4]]`},
		{oidInt8, `{9223372036854775807}`, `[9223372036854775807]`},
		{oidFloat8, `{1.5,NaN,Infinity,-Infinity,-0,1e+21,1e-07}`, `[1.5,null,null,null,0,1e+21,1e-7]`},
		{oidFloat4, `{1.1}`, `[1.1]`},
		{oidBool, `{t,f,NULL}`, `[1,0,null]`},
		{25, `{"a b","NULL",NULL,"x\"y\\z","",plain}`, `["a b","NULL",null,"x\"y\\z","","plain"]`},
		{25, `{"{}","a,b","}"}`, `["{}","a,b","}"]`},
		{25, `{ a , "b" }`, `["a","b"]`},
		{25, `{a\,b}`, `["a,b"]`},
		{oidJSONB, `{"{\"a\": 1}",NULL,"[1, 2]"}`, `[{"a": 1},null,[1, 2]]`},
		{oidBytea, `{"\\x00ff",NULL}`, `[null,null]`},
		{oidTimestamptz, `{"2026-01-01 09:00:00.5+00",infinity,"0044-03-15 10:00:00+00 BC"}`, `["2026-01-01 09:00:00.5Z","9999-12-31 23:59:59Z",null]`},
		{oidUUID, `{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}`, `["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]`},
		{1700, `{1.50,NaN}`, `["1.50","NaN"]`},
	}
	for _, c := range cases {
		col := Column{Name: "a", TypeOID: 1, IsArray: true, ElemOID: c.elem, ElemDelim: ','}
		v, err := DecodeText(col, []byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if v.Kind() != model.KindText || v.Str() != c.want {
			t.Errorf("DecodeText(%s) = %v, want %s", c.in, v, c.want)
		}
	}
	box := Column{Name: "b", IsArray: true, ElemOID: 603, ElemDelim: ';'}
	if v, err := DecodeText(box, []byte(`{(1,1),(0,0);(3,3),(2,2)}`)); err != nil || v.Str() != `["(1,1),(0,0)","(3,3),(2,2)"]` {
		t.Errorf("box[]: %v %v", v, err)
	}
	for _, bad := range []string{``, `{`, `{1`, `{1,}`, `{,1}`, `{1}}`, `{"a}`, `{a"b}`, `[0:1]{1}`, `{{{{{{{1}}}}}}}`, `{x}`} {
		col := Column{Name: "a", IsArray: true, ElemOID: oidInt4}
		if bad == `{a"b}` {
			col.ElemOID = 25
		}
		if _, err := DecodeText(col, []byte(bad)); err == nil {
			t.Errorf("DecodeText(%q) succeeded, want error", bad)
		}
	}
}

func TestDecodeTextScalars(t *testing.T) {
	cases := []struct {
		oid  uint32
		in   string
		want model.Value
	}{
		{oidInt2, "-32768", model.Int(-32768)},
		{oidInt8, "9223372036854775807", model.Int(math.MaxInt64)},
		{oidOID, "4294967295", model.Int(4294967295)},
		{oidBool, "t", model.Int(1)},
		{oidBool, "f", model.Int(0)},
		{oidFloat4, "1.1", model.Real(1.1)},
		{oidFloat8, "-0", model.Real(math.Copysign(0, -1))},
		{oidFloat8, "NaN", model.Real(math.NaN())},
		{oidFloat8, "-Infinity", model.Real(math.Inf(-1))},
		{oidBytea, `\x00ff10`, model.Blob([]byte{0, 0xff, 0x10})},
		{oidBytea, `\x`, model.Blob([]byte{})},
		{oidBytea, `a\\b\001`, model.Blob([]byte{'a', '\\', 'b', 1})},
		{25, "héllo", model.Text("héllo")},
		{oidJSONB, `{"a": 1}`, model.Text(`{"a": 1}`)},
		{1700, "1.50", model.Text("1.50")},
		{oidUUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", model.Text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")},
	}
	for _, c := range cases {
		v, err := DecodeText(Column{Name: "c", TypeOID: c.oid}, []byte(c.in))
		if err != nil || !v.Equal(c.want) {
			t.Errorf("DecodeText(%d, %q) = %v, %v; want %v", c.oid, c.in, v, err, c.want)
		}
	}
	if v, err := DecodeText(Column{TypeOID: 25}, nil); err != nil || !v.IsNull() {
		t.Errorf("nil data = %v, %v; want NULL", v, err)
	}
	for _, c := range []struct {
		oid uint32
		in  string
	}{{oidInt4, "x"}, {oidBool, "maybe"}, {oidFloat8, ""}, {oidBytea, `\x0`}, {oidBytea, `\xzz`}, {oidBytea, `a\b`}} {
		_, err := DecodeText(Column{Name: "c", TypeName: "t", TypeOID: c.oid}, []byte(c.in))
		if err == nil || !strings.Contains(err.Error(), "decode column c (t)") {
			t.Errorf("DecodeText(%d, %q) error = %v", c.oid, c.in, err)
		}
	}
}

func TestFloat4MatchesPostgresText(t *testing.T) {
	// Postgres prints float4 1.1 as "1.1"; the stream parses that as the
	// double 1.1, so the binary path must not widen to 1.100000023841858.
	for _, f := range []float32{1.1, 0.1, 3.4028235e38, 1e-45, -2.5, 16777217} {
		var raw [4]byte
		binary.BigEndian.PutUint32(raw[:], math.Float32bits(f))
		v, err := decodeBinary(Column{TypeOID: oidFloat4}, raw[:])
		if err != nil {
			t.Fatal(err)
		}
		key := string(appendKeyText(nil, codecFloat4, raw[:]))
		txt, _ := DecodeText(Column{TypeOID: oidFloat4}, []byte(key))
		if !v.Equal(txt) {
			t.Errorf("float4 %v: binary %v, text %v", f, v, txt)
		}
	}
	if got := float4Value(1.1); got != 1.1 {
		t.Errorf("float4Value(1.1) = %v", got)
	}
}

func TestDecodeBinaryErrors(t *testing.T) {
	if _, err := decodeBinary(Column{Name: "n", TypeName: "numeric", TypeOID: 1700}, []byte{1}); err == nil {
		t.Error("numeric has no binary decoder but decodeBinary accepted it")
	}
	for _, oid := range []uint32{oidInt2, oidInt4, oidInt8, oidOID, oidFloat4, oidFloat8, oidBool, oidUUID, oidTimestamptz} {
		if _, err := decodeBinary(Column{Name: "c", TypeOID: oid}, []byte{1, 2, 3}); err == nil {
			t.Errorf("oid %d: short binary value accepted", oid)
		}
	}
	u := []byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	if v, _ := decodeBinary(Column{TypeOID: oidUUID}, u); v.Str() != "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" {
		t.Errorf("uuid = %v", v)
	}
}

func TestParseTableName(t *testing.T) {
	cases := map[string][2]string{
		"todos":             {"public", "todos"},
		"app.todos":         {"app", "todos"},
		`"My Schema"."a.b"`: {"My Schema", "a.b"},
		`app."q""uote"`:     {"app", `q"uote`},
		"Mixed.Case":        {"Mixed", "Case"},
	}
	for in, want := range cases {
		s, n, err := ParseTableName(in)
		if err != nil || s != want[0] || n != want[1] {
			t.Errorf("ParseTableName(%q) = %q, %q, %v", in, s, n, err)
		}
	}
	for _, bad := range []string{"", "a.b.c", `"unterminated`, ".x", "x.", `"a"b`} {
		if _, _, err := ParseTableName(bad); !errors.Is(err, ErrBadTableName) {
			t.Errorf("ParseTableName(%q) error = %v", bad, err)
		}
	}
	if got := qualify("public", "Todos"); got != `public."Todos"` {
		t.Errorf("qualify = %s", got)
	}
}

func TestQuantiles(t *testing.T) {
	var keys [][]string
	for i := 0; i < 10; i++ {
		keys = append(keys, []string{string(rune('a' + i))})
	}
	got := quantiles(keys, 4)
	if len(got) != 3 || got[0][0] != "c" || got[1][0] != "f" || got[2][0] != "h" {
		t.Errorf("quantiles = %v", got)
	}
	if got := quantiles(keys[:2], 4); len(got) != 2 {
		t.Errorf("quantiles of 2 keys into 4 = %v, want 2 distinct bounds", got)
	}
	if got := quantiles(nil, 4); len(got) != 0 {
		t.Errorf("quantiles(nil) = %v", got)
	}
}

func TestWalLevelMessage(t *testing.T) {
	if err := walLevelProblem("logical"); err != nil {
		t.Fatal(err)
	}
	err := walLevelProblem("replica")
	if !errors.Is(err, ErrWalLevel) || !strings.Contains(err.Error(), "wal_level = replica") ||
		!strings.Contains(err.Error(), "set wal_level = logical in postgresql.conf and restart the server") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("message = %q", err)
	}
}
