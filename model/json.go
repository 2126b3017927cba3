package model

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// AppendJSONString appends s (a string or byte slice, without converting or
// allocating) as a JSON string, escaped the way JavaScript's JSON.stringify
// escapes it, because PowerSync writes its rows, ids and sync lines with
// it: quote and backslash, \b \t \n \f \r, other control characters as
// \u00xx; everything else verbatim (no HTML escaping of < > &, U+2028 and
// U+2029 as they are). Each byte that is not part of valid UTF-8 becomes
// U+FFFD, as encoding/json does; JSON.stringify never meets invalid UTF-8.
//
// It is the one JSON string escaper of syncpipe: row data, bucket ids,
// lookups and the sync API's lines all use it, so the same string is
// written the same way everywhere (row checksums depend on it).
func AppendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			// One pass: a rune is decoded only where a byte is not ASCII
			// (checking the whole string for valid UTF-8 first cost a
			// second pass over every string of every row).
			var rb [utf8.UTFMax]byte
			r, w := utf8.DecodeRune(rb[:copy(rb[:], s[i:])])
			if r != utf8.RuneError || w != 1 {
				i += w
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
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
			const hexd = "0123456789abcdef"
			dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&15])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendJSONNumber appends f as JSON.stringify writes a number: as
// AppendJSNumber, except that NaN and ±Infinity become null. Bucket ids and
// array columns use it (so REAL 1.0 and INTEGER 1 give the same text).
func AppendJSONNumber(dst []byte, f float64) []byte {
	if f != f || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return AppendJSNumber(dst, f)
}

// AppendJSNumber appends f as JavaScript's Number.prototype.toString
// prints it (1 → "1", 1e21 → "1e+21", NaN → "NaN"): shortest round-trip
// digits, plain notation for exponents in [-7, 21), otherwise d.ddde±x.
// PowerSync evaluates and serializes in JavaScript, so numbers written into
// JSON text (rows, array columns, bucket ids) follow it, not Go.
func AppendJSNumber(dst []byte, f float64) []byte {
	switch {
	case f != f:
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // d[.ddd]e±xx
	epos := 0
	for epos < len(e) && e[epos] != 'e' {
		epos++
	}
	var digits [24]byte
	k := 0
	for _, c := range e[:epos] {
		if c != '.' {
			digits[k] = c
			k++
		}
	}
	exp, _ := strconv.Atoi(string(e[epos+1:]))
	n := exp + 1 // value = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits[:k]...)
		for i := k; i < n; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:k]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -n; i++ {
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
