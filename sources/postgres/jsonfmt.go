package postgres

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// The JSON written for array columns must match what PowerSync writes, and
// PowerSync writes it with JavaScript's JSON.stringify. These helpers follow
// the ECMAScript rules for the two parts that differ from Go's encoders:
// number formatting and string escaping.

// appendJSNumber appends x as ECMAScript Number::toString would, with the
// JSON.stringify twist that non-finite numbers become null.
func appendJSNumber(dst []byte, x float64) []byte {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return append(dst, "null"...)
	case x == 0: // also -0, which JavaScript prints as "0"
		return append(dst, '0')
	}
	if x < 0 {
		dst = append(dst, '-')
		x = -x
	}
	var tmp [32]byte
	sci := strconv.AppendFloat(tmp[:0], x, 'e', -1, 64) // d[.ddd]e±xx
	var digits [20]byte
	k := 0
	i := 0
	for ; sci[i] != 'e'; i++ {
		if sci[i] != '.' {
			digits[k] = sci[i]
			k++
		}
	}
	exp := 0 // d.ddd × 10^exp
	for _, c := range sci[i+2:] {
		exp = exp*10 + int(c-'0')
	}
	if sci[i+1] == '-' {
		exp = -exp
	}
	n := exp + 1 // 0.ddd × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits[:k]...)
		for j := k; j < n; j++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:k]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for j := n; j < 0; j++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits[:k]...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:k]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// appendJSString appends s as a JSON string the way JSON.stringify escapes
// it: quote, backslash and control characters only; everything else is
// copied. Invalid UTF-8 (which a UTF8 database never produces) becomes
// U+FFFD, as JavaScript's UTF-8 decoder would make it.
func appendJSString(dst []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
