package syncrules

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/syncpipe/syncpipe/model"
)

// PowerSync evaluates rules in JavaScript, so number ↔ text conversions
// follow the ECMAScript algorithms, not Go's or SQLite's. These helpers
// implement exactly the parts rules can observe.

// appendJSONBigNumber appends a REAL the way PowerSync's JSONBig.stringify
// writes JavaScript numbers into row data: Number.prototype.toString, plus
// ".0" when that looks like an integer (so the type survives a round trip).
func appendJSONBigNumber(dst []byte, f float64) []byte {
	start := len(dst)
	dst = model.AppendJSNumber(dst, f)
	s := dst[start:]
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return dst
		}
	}
	return append(dst, '.', '0')
}

// appendJSONNumberPlain appends a number as JSON.stringify does: like
// toString, but non-finite values become null. Bucket ids use it, so REAL
// 1.0 and INTEGER 1 give the same id.
func appendJSONNumberPlain(dst []byte, f float64) []byte {
	if f != f || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return model.AppendJSNumber(dst, f)
}

// isJSSpace reports whether r is ECMAScript WhiteSpace or LineTerminator,
// the set trimmed by parseInt/parseFloat and matched by \s.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x2028, 0x2029, 0xFEFF:
		return true
	}
	return r > 0x7f && unicode.Is(unicode.Zs, r)
}

func trimJSSpaceLeft(s string) string {
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if !isJSSpace(r) {
			break
		}
		s = s[n:]
	}
	return s
}

// jsParseIntTruthy reports whether JavaScript's parseInt(s) is a non-zero
// number (PowerSync's text → boolean rule).
func jsParseIntTruthy(s string) bool {
	s = trimJSSpaceLeft(s)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	hex := false
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		hex = true
		s = s[2:]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		isDigit := c >= '0' && c <= '9'
		if hex {
			isDigit = isDigit || (c|0x20 >= 'a' && c|0x20 <= 'f')
		}
		if !isDigit {
			return false
		}
		if c != '0' {
			return true
		}
	}
	return false
}

// jsParseFloat implements JavaScript's parseFloat: the longest prefix (after
// whitespace) that is a decimal literal or Infinity; NaN if there is none.
func jsParseFloat(s string) float64 {
	s = trimJSSpaceLeft(s)
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	if strings.HasPrefix(s[i:], "Infinity") {
		if s[0] == '-' {
			return math.Inf(-1)
		}
		return math.Inf(1)
	}
	digits := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
		digits++
	}
	if i < len(s) && s[i] == '.' {
		j := i + 1
		frac := 0
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
			frac++
		}
		if digits+frac > 0 {
			i = j
			digits += frac
		}
	}
	if digits == 0 {
		return math.NaN()
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
			i = k
		}
	}
	f, _ := strconv.ParseFloat(s[:i], 64) // ErrRange gives ±Inf or 0, as JS does
	return f
}

// leadingDigits returns the run of ASCII digits at the start of s after
// JavaScript whitespace, as matched by /^\s*(\d+)/.
func leadingDigits(s string) string {
	s = trimJSSpaceLeft(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// parseDigitsInt64 converts a digit run to int64, saturating at MaxInt64
// (JavaScript would keep an arbitrary-precision BigInt).
func parseDigitsInt64(d string) int64 {
	v, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return math.MaxInt64
	}
	return v
}

// jsStringLen returns JavaScript's String.prototype.length: UTF-16 code
// units.
func jsStringLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		i += w
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// floatToInt64 converts a float to int64 with saturation. Values must be
// finite.
func floatToInt64(f float64) int64 {
	if f >= 9.223372036854775807e18 {
		return math.MaxInt64
	}
	if f < -9.223372036854775808e18 {
		return math.MinInt64
	}
	return int64(f)
}

// jsNumberValue is a JSON number as the service reads it (JSON.parse: a
// double): INTEGER when integral and within int64, REAL otherwise.
func jsNumberValue(v *jval) model.Value {
	f := v.numFloat()
	if isSafeIntegral(f) {
		return model.Int(int64(f))
	}
	return model.Real(f)
}

// isSafeIntegral reports whether f is an integer that int64 represents
// exactly, so it can be normalised to INTEGER.
func isSafeIntegral(f float64) bool {
	return f == math.Trunc(f) && f >= -9.223372036854775808e18 && f < 9.223372036854775807e18
}
