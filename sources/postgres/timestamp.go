package postgres

import (
	"errors"
	"math"
	"time"
)

// Timestamps with time zone become TEXT "YYYY-MM-DD HH:MM:SS[.fraction]Z" in
// UTC (SPEC §3). The fraction is the microseconds with trailing zeros
// trimmed, which is how Postgres prints it; infinity and -infinity map to
// fixed strings. Values PowerSync cannot represent (BC dates and years after
// 9999: its JavaScript date parser rejects them) become NULL, as in
// PowerSync. Both the binary snapshot path and the text stream path go
// through appendTimestamptzValue, so they agree byte for byte. The ISO
// styles (edition 2+, see TimeStyle) put a 'T' between date and time and
// always print the style's fraction digits: "2024-01-02T03:04:05.100000Z".

const (
	pgEpochUnixMicros = 946684800 * 1000000 // 2000-01-01 00:00:00 UTC in Unix µs
	// Range of finite timestamps Postgres accepts (4714-11-24 BC to
	// 294276 AD), in Postgres-epoch microseconds; outside it, binary input is
	// corrupt.
	pgMinMicros = -211813488000000000
	pgMaxMicros = 9223371331200000000 - 1
)

const (
	tsInfinity    = "9999-12-31 23:59:59Z"
	tsNegInfinity = "0000-01-01 00:00:00Z"
)

var errBadTimestamp = errors.New("malformed timestamptz")

// appendTimestamptzBinary formats a binary timestamptz (µs since 2000-01-01
// UTC) in style st. ok is false when the value maps to NULL.
func appendTimestamptzBinary(dst []byte, pgMicros int64, st TimeStyle) (out []byte, ok bool) {
	switch {
	case pgMicros == math.MaxInt64:
		return appendTimestamptzInfinity(dst, tsInfinity, st), true
	case pgMicros == math.MinInt64:
		return appendTimestamptzInfinity(dst, tsNegInfinity, st), true
	case pgMicros < pgMinMicros || pgMicros > pgMaxMicros:
		return dst, false
	}
	return appendTimestamptzValue(dst, pgMicros+pgEpochUnixMicros, st)
}

// appendTimestamptzInfinity appends the fixed text of ±infinity (legacy
// form) in style st: PowerSync pads it like any value without a fraction.
func appendTimestamptzInfinity(dst []byte, legacy string, st TimeStyle) []byte {
	if st == TimeLegacy {
		return append(dst, legacy...)
	}
	dst = append(dst, legacy[:10]...)
	dst = append(dst, 'T')
	dst = append(dst, legacy[11:19]...)
	dst = appendISOFraction(dst, nil, st)
	return append(dst, 'Z')
}

// appendTimestamptzValue formats Unix microseconds in style st.
func appendTimestamptzValue(dst []byte, unixMicros int64, st TimeStyle) ([]byte, bool) {
	sec, us := floorDivMod(unixMicros, 1000000)
	t := time.Unix(sec, 0).UTC()
	y, mo, d := t.Date()
	if y < 1 || y > 9999 {
		return dst, false
	}
	if st == TimeLegacy {
		dst = appendDateTime(dst, y, int(mo), d, t, ' ')
		dst = appendFraction(dst, us)
	} else {
		dst = appendDateTime(dst, y, int(mo), d, t, 'T')
		var f [6]byte
		dst = appendISOFraction(dst, appendPadded(f[:0], int(us), 6), st)
	}
	return append(dst, 'Z'), true
}

// appendTimestamptzKey formats a binary timestamptz as Postgres input text
// that parses back to exactly the same value (used for snapshot keys).
func appendTimestamptzKey(dst []byte, pgMicros int64) []byte {
	switch pgMicros {
	case math.MaxInt64:
		return append(dst, "infinity"...)
	case math.MinInt64:
		return append(dst, "-infinity"...)
	}
	sec, us := floorDivMod(pgMicros, 1000000)
	t := time.Unix(sec+pgEpochUnixMicros/1000000, 0).UTC()
	y, mo, d := t.Date()
	bc := y <= 0
	if bc {
		y = 1 - y
	}
	dst = appendDateTime(dst, y, int(mo), d, t, ' ')
	dst = appendFraction(dst, us)
	dst = append(dst, "+00"...)
	if bc {
		dst = append(dst, " BC"...)
	}
	return dst
}

// appendDateTime appends "YYYY-MM-DD<sep>HH:MM:SS".
func appendDateTime(dst []byte, y, mo, d int, t time.Time, sep byte) []byte {
	hh, mi, ss := t.Clock()
	dst = appendPadded(dst, y, 4)
	dst = append(dst, '-')
	dst = appendPadded(dst, mo, 2)
	dst = append(dst, '-')
	dst = appendPadded(dst, d, 2)
	dst = append(dst, sep)
	dst = appendPadded(dst, hh, 2)
	dst = append(dst, ':')
	dst = appendPadded(dst, mi, 2)
	dst = append(dst, ':')
	return appendPadded(dst, ss, 2)
}

// appendFraction appends ".ffffff" with trailing zeros trimmed, or nothing.
func appendFraction(dst []byte, us int64) []byte {
	if us == 0 {
		return dst
	}
	var f [6]byte
	for i := 5; i >= 0; i-- {
		f[i] = byte('0' + us%10)
		us /= 10
	}
	n := 6
	for f[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, f[:n]...)
}

// appendPadded appends a non-negative v with at least width digits.
func appendPadded(dst []byte, v, width int) []byte {
	var b [20]byte
	i := len(b)
	for v >= 10 || width > 1 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		width--
	}
	i--
	b[i] = byte('0' + v)
	return append(dst, b[i:]...)
}

func floorDivMod(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q--
		r += b
	}
	return q, r
}

// decodeTimestamptzText converts Postgres's ISO text output of a
// timestamptz ("2026-01-01 09:00:00.5+00", any offset, optional " BC",
// "infinity", "-infinity") to style st. ok is false for NULL results.
func decodeTimestamptzText(dst, s []byte, st TimeStyle) (out []byte, ok bool, err error) {
	switch string(s) {
	case "infinity":
		return appendTimestamptzInfinity(dst, tsInfinity, st), true, nil
	case "-infinity":
		return appendTimestamptzInfinity(dst, tsNegInfinity, st), true, nil
	}
	p := tsParser{s: s, ok: true}
	year := p.digits(1, 7)
	p.expect('-')
	month := p.digits(2, 2)
	p.expect('-')
	day := p.digits(2, 2)
	if p.ok && p.i < len(s) && (s[p.i] == ' ' || s[p.i] == 'T') {
		p.i++
	} else {
		p.ok = false
	}
	hour := p.digits(2, 2)
	p.expect(':')
	minute := p.digits(2, 2)
	p.expect(':')
	second := p.digits(2, 2)
	var micros int64
	if p.peek('.') {
		start := p.i
		frac := p.digits(1, 6)
		for n := p.i - start; n < 6; n++ {
			frac *= 10
		}
		micros = int64(frac)
	}
	offset := 0
	switch {
	case p.peek('Z'):
	case p.i < len(s) && (s[p.i] == '+' || s[p.i] == '-'):
		sign := 1
		if s[p.i] == '-' {
			sign = -1
		}
		p.i++
		offset = p.digits(2, 2) * 3600
		if p.peek(':') {
			offset += p.digits(2, 2) * 60
			if p.peek(':') {
				offset += p.digits(2, 2)
			}
		}
		offset *= sign
	}
	bc := false
	if p.ok && string(s[p.i:]) == " BC" {
		bc = true
		p.i = len(s)
	}
	// Years beyond Postgres's range (294276 AD) would overflow µs; reject.
	if !p.ok || p.i != len(s) || month < 1 || month > 12 || day < 1 || day > 31 ||
		hour > 24 || minute > 59 || second > 60 || year == 0 || year > 300000 {
		return dst, false, errBadTimestamp
	}
	if bc {
		year = 1 - year
	}
	sec := time.Date(year, time.Month(month), day, hour, minute, second, 0, time.UTC).Unix() - int64(offset)
	out, ok = appendTimestamptzValue(dst, sec*1000000+micros, st)
	return out, ok, nil
}

type tsParser struct {
	s  []byte
	i  int
	ok bool
}

// digits reads between min and max decimal digits; on failure it clears ok
// (all later reads are no-ops, so callers check ok once at the end).
func (p *tsParser) digits(min, max int) int {
	if !p.ok {
		return 0
	}
	v, n := 0, 0
	for p.i < len(p.s) && n < max && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		v = v*10 + int(p.s[p.i]-'0')
		p.i++
		n++
	}
	if n < min {
		p.ok = false
	}
	return v
}

func (p *tsParser) expect(c byte) {
	if !p.peek(c) {
		p.ok = false
	}
}

// peek consumes c if it is next.
func (p *tsParser) peek(c byte) bool {
	if p.ok && p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}
