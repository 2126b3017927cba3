package model

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
)

// Kind is the SQLite storage class of a Value. Sync rules evaluate with
// SQLite types (SPEC §3), so every source value is first converted to one of
// these.
type Kind uint8

// The five SQLite storage classes, and KindJSON.
const (
	KindNull Kind = iota
	KindInteger
	KindReal
	KindText
	KindBlob

	// KindJSON is a value JavaScript keeps and SQLite has no storage class
	// for: true, false, an object or an array taken from a JSON document
	// (PowerSync puts JSON.parse output into bucket ids as it is). It holds
	// the JSON text it is written as; see JSON.
	KindJSON
)

// String returns the SQLite typeof() name of the kind. KindJSON has none
// and reads as "null", as SQLite would see it.
func (k Kind) String() string {
	switch k {
	case KindInteger:
		return "integer"
	case KindReal:
		return "real"
	case KindText:
		return "text"
	case KindBlob:
		return "blob"
	default:
		return "null"
	}
}

// Value is one SQLite-typed value. It is a small struct rather than an
// interface so that rows ([]Value) can be built and evaluated without
// boxing; copy it freely. The zero Value is NULL.
//
// The Postgres decode stage converts source values with the constructors
// (SPEC §3 "Source values → rule values"): int2/4/8 and oid → Int, bool →
// Bool, float4/8 → Real, bytea → Blob, everything else → Text in Postgres
// text form.
type Value struct {
	kind Kind
	n    uint64 // int64 or float64 bits
	s    string // TEXT, or the JSON text of KindJSON
	b    []byte // BLOB
}

// Null returns the NULL value.
func Null() Value { return Value{} }

// Int returns an INTEGER value.
func Int(v int64) Value { return Value{kind: KindInteger, n: uint64(v)} }

// Real returns a REAL value.
func Real(v float64) Value { return Value{kind: KindReal, n: math.Float64bits(v)} }

// Text returns a TEXT value.
func Text(v string) Value { return Value{kind: KindText, s: v} }

// Blob returns a BLOB value. The slice is retained, not copied; the caller
// must not modify it while the value is in use.
func Blob(v []byte) Value { return Value{kind: KindBlob, b: v} }

// Bool returns INTEGER 1 or 0, which is how SQLite (and PowerSync) represent
// booleans.
func Bool(v bool) Value {
	if v {
		return Int(1)
	}
	return Int(0)
}

// JSON returns a KindJSON value holding text, which must be the JSON of
// true, false, an object or an array (strings, numbers and null have their
// own kinds).
func JSON(text string) Value { return Value{kind: KindJSON, s: text} }

// Kind returns the storage class.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether the value is NULL.
func (v Value) IsNull() bool { return v.kind == KindNull }

// IsNumeric reports whether the value is an INTEGER or a REAL.
func (v Value) IsNumeric() bool { return v.kind == KindInteger || v.kind == KindReal }

// Int64 returns the INTEGER payload (0 for other kinds).
func (v Value) Int64() int64 {
	if v.kind != KindInteger {
		return 0
	}
	return int64(v.n)
}

// Float64 returns the REAL payload (0 for other kinds).
func (v Value) Float64() float64 {
	if v.kind != KindReal {
		return 0
	}
	return math.Float64frombits(v.n)
}

// Str returns the TEXT payload ("" for other kinds).
func (v Value) Str() string {
	if v.kind != KindText {
		return ""
	}
	return v.s
}

// Bytes returns the BLOB payload (nil for other kinds).
func (v Value) Bytes() []byte {
	if v.kind != KindBlob {
		return nil
	}
	return v.b
}

// JSONText returns the JSON text of a KindJSON value ("" for other kinds).
func (v Value) JSONText() string {
	if v.kind != KindJSON {
		return ""
	}
	return v.s
}

// String renders the value for debugging and test output: text as a Go
// quoted string, blobs as x'..' hex, numbers as JavaScript would print them.
func (v Value) String() string {
	switch v.kind {
	case KindInteger:
		return strconv.FormatInt(v.Int64(), 10)
	case KindReal:
		return string(AppendJSNumber(nil, v.Float64()))
	case KindText:
		return strconv.Quote(v.s)
	case KindBlob:
		return "x'" + strings.ToUpper(hex.EncodeToString(v.b)) + "'"
	default:
		return "NULL"
	}
}

// Equal reports whether two values have the same kind and payload (REAL
// compared bitwise except that NaN equals NaN). It is for tests and
// de-duplication, not SQL "=".
func (v Value) Equal(o Value) bool {
	if v.kind != o.kind {
		return false
	}
	switch v.kind {
	case KindText, KindJSON:
		return v.s == o.s
	case KindBlob:
		return string(v.b) == string(o.b)
	default:
		return v.n == o.n
	}
}
