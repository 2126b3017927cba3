package syncrules

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncpipe/syncpipe/model"
)

// Errors returned while evaluating a row. They never abort other queries;
// see Evaluator.
var (
	// ErrCompareBlobs: PowerSync cannot order two BLOBs.
	ErrCompareBlobs = errors.New("comparing blobs is not supported")
	// ErrNotJSONArray: the right side of IN is not TEXT holding a JSON array.
	ErrNotJSONArray = errors.New("IN is only supported on JSON arrays")
	// ErrJSONPath: json_extract paths must start with "$".
	ErrJSONPath = errors.New("JSON path must start with $")
	// ErrNotNumber: CAST of NaN or ±Infinity to integer.
	ErrNotNumber = errors.New("cannot convert a non-finite number to integer")
)

// textOf converts a non-NULL value to text as PowerSync's castAsText does
// (numbers as JavaScript prints them, blobs decoded as UTF-8).
func textOf(v model.Value) string {
	switch v.Kind() {
	case model.KindText:
		return v.Str()
	case model.KindInteger:
		return strconv.FormatInt(v.Int64(), 10)
	case model.KindReal:
		return string(model.AppendJSNumber(nil, v.Float64()))
	case model.KindBlob:
		return decodeUTF8(v.Bytes())
	default:
		return ""
	}
}

// appendText appends textOf(v) without the intermediate string.
func appendText(dst []byte, v model.Value) []byte {
	switch v.Kind() {
	case model.KindText:
		return append(dst, v.Str()...)
	case model.KindInteger:
		return strconv.AppendInt(dst, v.Int64(), 10)
	case model.KindReal:
		return model.AppendJSNumber(dst, v.Float64())
	case model.KindBlob:
		return append(dst, decodeUTF8(v.Bytes())...)
	}
	return dst
}

// decodeUTF8 mirrors TextDecoder("utf-8"): a leading BOM is dropped and
// invalid bytes become U+FFFD.
func decodeUTF8(b []byte) string {
	if len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF {
		b = b[3:]
	}
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, w := utf8.DecodeRune(b)
		sb.WriteRune(r)
		b = b[w:]
	}
	return sb.String()
}

// blobOf converts a non-NULL value to bytes (castAsBlob).
func blobOf(v model.Value) []byte {
	if v.Kind() == model.KindBlob {
		return v.Bytes()
	}
	return []byte(textOf(v))
}

// castNumeric is CAST(x AS numeric) and the operand conversion of
// arithmetic, as PowerSync's parseNumeric: text keeps its leading
// (optionally signed) number, INTEGER when it has no fraction or exponent,
// REAL otherwise; text without one is INTEGER 0.
func castNumeric(v model.Value) model.Value {
	switch v.Kind() {
	case model.KindInteger, model.KindReal:
		return v
	case model.KindText, model.KindBlob:
		s := trimJSSpaceLeft(textOf(v))
		i := 0
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		intStart := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		intDigits := i - intStart
		isInt := true
		if i < len(s) && s[i] == '.' {
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if intDigits == 0 && j == i+1 {
				return model.Int(0) // neither "1" nor ".5"
			}
			i, isInt = j, false
		} else if intDigits == 0 {
			return model.Int(0)
		}
		if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
			j := i + 1
			if j < len(s) && (s[j] == '+' || s[j] == '-') {
				j++
			}
			k := j
			for k < len(s) && s[k] >= '0' && s[k] <= '9' {
				k++
			}
			if k > j {
				i, isInt = k, false
			}
		}
		if isInt {
			if n, err := strconv.ParseInt(strings.TrimPrefix(s[:i], "+"), 10, 64); err == nil {
				return model.Int(n)
			}
		}
		f := jsParseFloat(s[:i])
		if f != f {
			return model.Int(0)
		}
		return model.Real(f)
	}
	return model.Int(0)
}

// castReal is CAST(x AS real): JavaScript parseFloat for text, NaN → 0.
func castReal(v model.Value) model.Value {
	switch v.Kind() {
	case model.KindReal:
		return v
	case model.KindInteger:
		return model.Real(float64(v.Int64()))
	case model.KindText, model.KindBlob:
		f := jsParseFloat(textOf(v))
		if f != f {
			f = 0
		}
		return model.Real(f)
	}
	return model.Real(0)
}

// castInteger is CAST(x AS integer): the leading (optionally signed)
// digits of text, floor of reals. Non-finite reals are an error
// (JavaScript's BigInt throws).
func castInteger(v model.Value) (model.Value, error) {
	switch v.Kind() {
	case model.KindInteger:
		return v, nil
	case model.KindReal:
		f := v.Float64()
		if f != f || math.IsInf(f, 0) {
			return model.Value{}, ErrNotNumber
		}
		return model.Int(floatToInt64(math.Floor(f))), nil
	case model.KindText, model.KindBlob:
		s := trimJSSpaceLeft(textOf(v))
		neg := false
		if s != "" && (s[0] == '+' || s[0] == '-') {
			neg, s = s[0] == '-', s[1:]
		}
		d := leadingDigits(s)
		if d == "" || (len(s) > 0 && s[0] != d[0]) {
			return model.Int(0), nil
		}
		n := parseDigitsInt64(d)
		if neg {
			n = -n
		}
		return model.Int(n), nil
	}
	return model.Int(0), nil
}

// castTo implements CAST(v AS to) for the five supported type names.
func castTo(v model.Value, to string) (model.Value, error) {
	if v.Kind() == model.KindNull {
		return v, nil
	}
	switch to {
	case "text":
		if v.Kind() == model.KindText {
			return v, nil
		}
		return model.Text(textOf(v)), nil
	case "numeric":
		return castNumeric(v), nil
	case "real":
		return castReal(v), nil
	case "integer":
		return castInteger(v)
	case "blob":
		return model.Blob(blobOf(v)), nil
	}
	return model.Value{}, fmt.Errorf("unsupported cast type %q", to)
}

// typeRank orders values of different classes as SQLite does.
func typeRank(k model.Kind) int {
	switch k {
	case model.KindNull:
		return 0
	case model.KindInteger, model.KindReal:
		return 1
	case model.KindText:
		return 2
	default:
		return 3
	}
}

// compareValues compares two values like PowerSync: numbers numerically
// (exactly, across INTEGER and REAL), text by UTF-16 code units (JavaScript
// string order), different classes by SQLite's class order.
func compareValues(a, b model.Value) (int, error) {
	if a.IsNumeric() && b.IsNumeric() {
		return compareNumbers(a, b), nil
	}
	if a.Kind() == model.KindText && b.Kind() == model.KindText {
		return compareUTF16(a.Str(), b.Str()), nil
	}
	if a.Kind() == model.KindBlob && b.Kind() == model.KindBlob {
		return 0, ErrCompareBlobs
	}
	return typeRank(a.Kind()) - typeRank(b.Kind()), nil
}

func compareNumbers(a, b model.Value) int {
	if a.Kind() == model.KindInteger && b.Kind() == model.KindInteger {
		x, y := a.Int64(), b.Int64()
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	if (a.Kind() == model.KindReal && a.Float64() != a.Float64()) || (b.Kind() == model.KindReal && b.Float64() != b.Float64()) {
		return -1 // NaN: neither equal nor greater, so PowerSync's compare() says less
	}
	if a.Kind() == model.KindReal && b.Kind() == model.KindReal {
		x, y := a.Float64(), b.Float64()
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	if a.Kind() == model.KindInteger {
		return -compareFloatInt(b.Float64(), a.Int64())
	}
	return compareFloatInt(a.Float64(), b.Int64())
}

// compareFloatInt compares a (non-NaN) double with an int64 exactly, as
// JavaScript compares a number with a BigInt.
func compareFloatInt(f float64, i int64) int {
	if math.IsInf(f, 1) {
		return 1
	}
	if math.IsInf(f, -1) {
		return -1
	}
	bf := new(big.Float).SetFloat64(f)
	return bf.Cmp(new(big.Float).SetInt64(i))
}

// compareUTF16 orders strings by UTF-16 code units. It equals byte order
// except when the first difference is between a supplementary character and
// one in U+E000..U+FFFF.
func compareUTF16(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) || i == len(b) {
		return len(a) - len(b)
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	ka, kb := utf16Key(ra), utf16Key(rb)
	switch {
	case ka < kb:
		return -1
	case ka > kb:
		return 1
	}
	return strings.Compare(a[i:], b[i:])
}

func utf16Key(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

// arith evaluates + - * / with PowerSync semantics: NULL in, NULL out;
// operands converted with castNumeric; division by zero is NULL; INTEGER op
// INTEGER stays INTEGER (falling back to REAL on int64 overflow, where
// JavaScript would use an unbounded BigInt) and integer division truncates.
func arith(op byte, a, b model.Value) (model.Value, error) {
	if a.Kind() == model.KindNull || b.Kind() == model.KindNull {
		return model.Null(), nil
	}
	a, b = castNumeric(a), castNumeric(b)
	if op == '/' && ((b.Kind() == model.KindInteger && b.Int64() == 0) || (b.Kind() == model.KindReal && b.Float64() == 0)) {
		return model.Null(), nil
	}
	if a.Kind() == model.KindInteger && b.Kind() == model.KindInteger {
		x, y := a.Int64(), b.Int64()
		switch op {
		case '+':
			r := x + y
			if (r > x) == (y > 0) {
				return model.Int(r), nil
			}
		case '-':
			r := x - y
			if (r < x) == (y > 0) {
				return model.Int(r), nil
			}
		case '*':
			if x == 0 || y == 0 {
				return model.Int(0), nil
			}
			r := x * y
			if r/y == x && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64) {
				return model.Int(r), nil
			}
		case '/':
			if !(x == math.MinInt64 && y == -1) {
				return model.Int(x / y), nil
			}
		}
		return arithFloat(op, float64(x), float64(y)), nil
	}
	return arithFloat(op, numAsFloat(a), numAsFloat(b)), nil
}

func numAsFloat(v model.Value) float64 {
	if v.Kind() == model.KindInteger {
		return float64(v.Int64())
	}
	return v.Float64()
}

func arithFloat(op byte, x, y float64) model.Value {
	switch op {
	case '+':
		return model.Real(x + y)
	case '-':
		return model.Real(x - y)
	case '*':
		return model.Real(x * y)
	default:
		return model.Real(x / y)
	}
}

// concat is ||: both sides as text, NULL if either is NULL.
func concat(a, b model.Value) model.Value {
	if a.Kind() == model.KindNull || b.Kind() == model.KindNull {
		return model.Null()
	}
	buf := make([]byte, 0, 32)
	buf = appendText(buf, a)
	buf = appendText(buf, b)
	return model.Text(string(buf))
}

// inJSONArray is "a IN b" for row values: b must be TEXT holding a JSON
// array, parsed losslessly (integers INTEGER, other numbers REAL, booleans
// 1/0, nested values JSON text); a is in it when an element compares equal
// (numbers by value across INTEGER and REAL, text by text).
func inJSONArray(a, b model.Value) (model.Value, error) {
	if a.Kind() == model.KindNull || b.Kind() == model.KindNull {
		return model.Null(), nil
	}
	if b.Kind() != model.KindText {
		return model.Value{}, ErrNotJSONArray
	}
	arr, err := parseJSONBig(b.Str())
	if err != nil {
		return model.Value{}, fmt.Errorf("IN: %w", err)
	}
	if arr.k != jArr {
		return model.Value{}, ErrNotJSONArray
	}
	for i := range arr.arr {
		el := &arr.arr[i]
		if el.k == jNull {
			continue
		}
		v := el.toSQLiteLegacy(false)
		if (v.IsNumeric() && a.IsNumeric() && compareNumbers(v, a) == 0) || (v.Kind() == model.KindText && a.Kind() == model.KindText && v.Str() == a.Str()) {
			return valTrue, nil
		}
	}
	return valFalse, nil
}
