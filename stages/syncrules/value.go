package syncrules

import (
	"math"
	"strconv"
)

// Kind is the SQLite storage class of a Value. Sync rules evaluate with
// SQLite types (SPEC §3), so every source value is first converted to one of
// these.
type Kind uint8

// The five SQLite storage classes.
const (
	KindNull Kind = iota
	KindInteger
	KindReal
	KindText
	KindBlob

	// kindJSON is a bucket parameter or lookup value that JavaScript keeps
	// and SQLite has no type for: true, false, an object or an array taken
	// from a JSON array (PowerSync puts JSON.parse output into bucket ids
	// as it is). s holds the JSON text it is written as.
	kindJSON
)

// String returns the SQLite typeof() name of the kind.
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
	s    string // TEXT
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

// Kind returns the storage class.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether the value is NULL.
func (v Value) IsNull() bool { return v.kind == KindNull }

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

// String renders the value for debugging and test output: text as a Go
// quoted string, blobs as x'..' hex, numbers as JavaScript would print them.
func (v Value) String() string {
	switch v.kind {
	case KindInteger:
		return strconv.FormatInt(v.Int64(), 10)
	case KindReal:
		return string(appendJSNumber(nil, v.Float64()))
	case KindText:
		return strconv.Quote(v.s)
	case KindBlob:
		return "x'" + hexUpper(v.b) + "'"
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
	case KindText:
		return v.s == o.s
	case KindBlob:
		return string(v.b) == string(o.b)
	default:
		return v.n == o.n
	}
}

func (v Value) isNumeric() bool { return v.kind == KindInteger || v.kind == KindReal }

// truthy is PowerSync's sqliteBool: NULL and BLOB are false, numbers are
// true when non-zero, TEXT is true when JavaScript's parseInt gives a
// non-zero number.
func (v Value) truthy() bool {
	switch v.kind {
	case KindInteger:
		return v.n != 0
	case KindReal:
		f := v.Float64()
		return f != 0 && f == f
	case KindText:
		return jsParseIntTruthy(v.s)
	default:
		return false
	}
}

var (
	valTrue  = Int(1)
	valFalse = Int(0)
)

func hexUpper(b []byte) string {
	const digits = "0123456789ABCDEF"
	out := make([]byte, len(b)*2)
	for i, c := range b {
		out[2*i] = digits[c>>4]
		out[2*i+1] = digits[c&15]
	}
	return string(out)
}
