package model

import (
	"math"
	"testing"
)

func TestValueAccessors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v       Value
		kind    Kind
		str     string
		numeric bool
	}{
		{Null(), KindNull, "NULL", false},
		{Int(-3), KindInteger, "-3", true},
		{Bool(true), KindInteger, "1", true},
		{Bool(false), KindInteger, "0", true},
		{Real(1e21), KindReal, "1e+21", true},
		{Text("a\"b"), KindText, `"a\"b"`, false},
		{Blob([]byte{0xab, 1}), KindBlob, "x'AB01'", false},
		{JSON(`{"a":1}`), KindJSON, "NULL", false},
	}
	for _, c := range cases {
		if c.v.Kind() != c.kind || c.v.String() != c.str || c.v.IsNumeric() != c.numeric || c.v.IsNull() != (c.kind == KindNull) {
			t.Errorf("%v: kind %v numeric %v null %v", c.v, c.v.Kind(), c.v.IsNumeric(), c.v.IsNull())
		}
	}
	if Int(7).Int64() != 7 || Int(7).Float64() != 0 || Real(2.5).Float64() != 2.5 || Real(2.5).Int64() != 0 {
		t.Error("numeric payloads")
	}
	if Text("x").Str() != "x" || Int(1).Str() != "" || string(Blob([]byte("y")).Bytes()) != "y" || Text("y").Bytes() != nil {
		t.Error("text and blob payloads")
	}
	if JSON("[1]").JSONText() != "[1]" || Text("[1]").JSONText() != "" || JSON("[1]").Str() != "" {
		t.Error("JSON payload")
	}
	if !(Value{}).Equal(Null()) || !(Value{}).IsNull() {
		t.Error("zero Value is not NULL")
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[Kind]string{KindNull: "null", KindInteger: "integer", KindReal: "real",
		KindText: "text", KindBlob: "blob", KindJSON: "null"} {
		if k.String() != want {
			t.Errorf("%d: %s, want %s", k, k, want)
		}
	}
}

func TestValueEqual(t *testing.T) {
	t.Parallel()
	nan := Real(math.NaN())
	equal := [][2]Value{{Null(), Null()}, {Int(1), Bool(true)}, {nan, nan}, {Text("a"), Text("a")},
		{Blob([]byte("a")), Blob([]byte("a"))}, {JSON("[1]"), JSON("[1]")}}
	for _, p := range equal {
		if !p[0].Equal(p[1]) {
			t.Errorf("%v != %v", p[0], p[1])
		}
	}
	differ := [][2]Value{{Int(1), Real(1)}, {Text("a"), Blob([]byte("a"))}, {Real(0), Real(math.Copysign(0, -1))},
		{Text("a"), Text("b")}, {JSON("[1]"), JSON("[2]")}, {Null(), Text("")}}
	for _, p := range differ {
		if p[0].Equal(p[1]) {
			t.Errorf("%v == %v", p[0], p[1])
		}
	}
}
