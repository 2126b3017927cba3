package postgres

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/syncpipe/syncpipe/model"
)

// fuzzColumns are the column shapes FuzzDecodeText picks from.
var fuzzColumns = []Column{
	{Name: "ts", TypeOID: oidTimestamptz},
	{Name: "by", TypeOID: oidBytea},
	{Name: "i", TypeOID: oidInt8},
	{Name: "f", TypeOID: oidFloat8},
	{Name: "b", TypeOID: oidBool},
	{Name: "t", TypeOID: 25},
	{Name: "a_t", IsArray: true, ElemOID: 25},
	{Name: "a_i", IsArray: true, ElemOID: oidInt4},
	{Name: "a_f", IsArray: true, ElemOID: oidFloat4},
	{Name: "a_b", IsArray: true, ElemOID: oidBool},
	{Name: "a_ts", IsArray: true, ElemOID: oidTimestamptz},
	{Name: "a_j", IsArray: true, ElemOID: oidJSONB},
	{Name: "a_by", IsArray: true, ElemOID: oidBytea},
	{Name: "a_box", IsArray: true, ElemOID: 603, ElemDelim: ';'},
}

var specTimestamp = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{0,5}[1-9])?Z$`)

// FuzzDecodeText feeds arbitrary text to every decoder: it must never panic,
// arrays must always come out as valid JSON, timestamps in the SPEC form
// (and decoding that form again is the identity), and hex bytea must
// round-trip.
func FuzzDecodeText(f *testing.F) {
	seeds := []string{
		"2026-01-01 09:00:00.5+00", "1900-01-01 00:19:32+00:19:32", "infinity", "0044-03-15 10:00:00+00 BC",
		`\x00ff`, `a\\b\001`, "-9223372036854775808", "NaN", "t",
		`{}`, `{1,NULL,-3}`, `[0:1]={1,2}`, `{{1,2},{3,4}}`, `{"a b","NULL",NULL,"x\"y\\z",""}`,
		`{1.5,NaN,Infinity,-0}`, `{"{\"a\": 1}",NULL}`, `{"\\x00ff"}`, `{(1,1),(0,0);(3,3),(2,2)}`,
		`{"2026-01-01 09:00:00.5+00",infinity}`, `{a\,b, c }`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		col := fuzzColumns[int(sel)%len(fuzzColumns)]
		v, err := DecodeText(col, data)
		if err != nil {
			if !v.IsNull() {
				t.Fatalf("error %v with non-NULL value %v", err, v)
			}
			return
		}
		switch {
		case col.IsArray:
			if v.Kind() != model.KindText || !json.Valid([]byte(v.Str())) || !strings.HasPrefix(v.Str(), "[") {
				t.Fatalf("%s %q: not a JSON array: %v", col.Name, data, v)
			}
		case col.TypeOID == oidTimestamptz:
			if v.IsNull() {
				return
			}
			if !specTimestamp.MatchString(v.Str()) {
				t.Fatalf("%q: %q is not in the SPEC form", data, v.Str())
			}
			again, err := DecodeText(col, []byte(v.Str()))
			if err != nil || !again.Equal(v) {
				t.Fatalf("%q: decoding %q again gives %v, %v", data, v.Str(), again, err)
			}
		case col.TypeOID == oidBytea && bytes.HasPrefix(data, []byte(`\x`)):
			if got := `\x` + hex.EncodeToString(v.Bytes()); got != strings.ToLower(string(data)) {
				t.Fatalf("%q: re-encodes as %q", data, got)
			}
		}
	})
}

// FuzzArrayRoundTrip builds a text[] literal the way array_out quotes its
// elements and checks that decoding gives back exactly those strings.
func FuzzArrayRoundTrip(f *testing.F) {
	f.Add([]byte("a\x00b c\x00\x00NULL\x00x\"y\\z\x00{}"), true)
	f.Add([]byte("plain"), false)
	f.Fuzz(func(t *testing.T, data []byte, nested bool) {
		if !isValidUTF8(data) {
			return
		}
		elems := strings.Split(string(data), "\x00")
		lit := arrayLiteral(elems)
		want := elems
		col := Column{Name: "a", IsArray: true, ElemOID: 25}
		v, err := DecodeText(col, []byte(lit))
		if err != nil {
			t.Fatalf("%q: %v", lit, err)
		}
		var got []string
		if nested {
			lit = "{" + lit + "," + lit + "}"
			v, err = DecodeText(col, []byte(lit))
			if err != nil {
				t.Fatalf("%q: %v", lit, err)
			}
			var two [][]string
			if err := json.Unmarshal([]byte(v.Str()), &two); err != nil || len(two) != 2 {
				t.Fatalf("%q → %s: %v", lit, v.Str(), err)
			}
			got = two[1]
		} else if err := json.Unmarshal([]byte(v.Str()), &got); err != nil {
			t.Fatalf("%q → %s: %v", lit, v.Str(), err)
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
			t.Fatalf("%q → %q, want %q", lit, got, want)
		}
	})
}

// arrayLiteral quotes like array_out: an element is quoted when it is
// empty, "NULL" (any case), or contains a special character or space.
func arrayLiteral(elems []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		if e == "" || strings.EqualFold(e, "null") || strings.ContainsAny(e, "{},\"\\ \t\n\r\v\f") {
			b.WriteByte('"')
			for _, c := range []byte(e) {
				if c == '"' || c == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(c)
			}
			b.WriteByte('"')
		} else {
			b.WriteString(e)
		}
	}
	b.WriteByte('}')
	return b.String()
}

func isValidUTF8(b []byte) bool { return strings.ToValidUTF8(string(b), "\ufffd") == string(b) }
