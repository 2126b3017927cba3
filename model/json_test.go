package model

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":                    `""`,
		"plain":               `"plain"`,
		"q\"b\\":              `"q\"b\\"`,
		"\n\t\r\b\f":          `"\n\t\r\b\f"`,
		"\x00\x01\x1f\x7f":    `"\u0000\u0001\u001f` + "\x7f\"",
		"é😀\u2028\u2029</x>&": "\"é😀\u2028\u2029</x>&\"",
		`1#by_list["a"]`:      `"1#by_list[\"a\"]"`,
		string([]byte{0xff}):  "\"\uFFFD\"",
		// Each invalid byte is replaced, as encoding/json does: a cut
		// three-byte sequence gives two replacement characters.
		"bad \xff utf8 \xe2\x82": "\"bad \uFFFD utf8 \uFFFD\uFFFD\"",
		"\xed\xa0\x80 surrogate": "\"\uFFFD\uFFFD\uFFFD surrogate\"",
		"ok\u00e9\xc3(\n":        "\"ok\u00e9\uFFFD(\\n\"",
	}
	for in, want := range cases {
		if got := string(AppendJSONString(nil, in)); got != want {
			t.Errorf("string %q → %s, want %s", in, got, want)
		}
		if got := string(AppendJSONString([]byte("x"), []byte(in))); got != "x"+want {
			t.Errorf("[]byte %q → %s, want x%s", in, got, want)
		}
	}
}

// TestAppendJSONStringNamedTypes covers types whose validity is not checked
// up front (the rune-by-rune path).
func TestAppendJSONStringNamedTypes(t *testing.T) {
	t.Parallel()
	type name string
	type raw []byte
	in := "a\"é\xff\n"
	want := string(AppendJSONString(nil, in))
	if got := string(AppendJSONString(nil, name(in))); got != want {
		t.Errorf("named string: %s, want %s", got, want)
	}
	if got := string(AppendJSONString(nil, raw(in))); got != want {
		t.Errorf("named []byte: %s, want %s", got, want)
	}
}

func TestAppendJSONStringAllocations(t *testing.T) {
	s := strings.Repeat("ünïcödé \"q\" \n", 8)
	b := []byte(s)
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendJSONString(buf[:0], s)
		buf = AppendJSONString(buf, b)
	}); n != 0 {
		t.Fatalf("AppendJSONString allocates %v times", n)
	}
}

// FuzzAppendJSONString checks that every output is JSON that
// encoding/json reads back as the input with invalid bytes replaced, and
// that strings and byte slices encode alike.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\", "\n\t\r\b\f\x00\x7f", "é😀\u2028</x>&", "\xff", "bad \xe2\x82", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q → %s: not JSON: %v", s, got, err)
		}
		// encoding/json replaces each invalid byte, as the escaper does.
		want, _ := json.Marshal(s)
		var wantBack string
		if err := json.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		if back != wantBack {
			t.Fatalf("%q → %s → %q, want %q", s, got, back, wantBack)
		}
		if !utf8.Valid(got) {
			t.Fatalf("%q → %s: invalid UTF-8", s, got)
		}
		if b := AppendJSONString(nil, []byte(s)); string(b) != string(got) {
			t.Fatalf("[]byte %q → %s, string → %s", s, b, got)
		}
	})
}

func TestAppendJSNumber(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f    float64
		want string
	}{
		{1, "1"}, {-2, "-2"}, {1.5, "1.5"}, {0.1, "0.1"}, {1e21, "1e+21"},
		{1e20, "100000000000000000000"}, {1e-7, "1e-7"}, {0.000001, "0.000001"},
		{123456789012345680000, "123456789012345680000"}, {math.Copysign(0, -1), "0"},
		{5e-324, "5e-324"}, {math.MaxFloat64, "1.7976931348623157e+308"}, {1.25e-5, "0.0000125"},
		{math.NaN(), "NaN"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
	}
	for _, c := range cases {
		if got := string(AppendJSNumber(nil, c.f)); got != c.want {
			t.Errorf("toString(%v) = %s, want %s", c.f, got, c.want)
		}
		// JSON.stringify writes what toString does, but null for what
		// JSON cannot hold.
		want := c.want
		if math.IsNaN(c.f) || math.IsInf(c.f, 0) {
			want = "null"
		}
		if got := string(AppendJSONNumber(nil, c.f)); got != want {
			t.Errorf("JSON.stringify(%v) = %s, want %s", c.f, got, want)
		}
	}
}
