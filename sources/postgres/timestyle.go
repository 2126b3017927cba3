package postgres

// TimeStyle is how temporal values render as TEXT. Edition 1 of the sync
// rules keeps PowerSync's historical text; the timestamps_iso8601
// compatibility option (on from edition 2) switches to ISO 8601 with a
// fixed number of sub-second digits, which timestamp_max_precision can
// lower. Only timestamptz, timestamp and time change (as in PowerSync,
// whose Postgres adapter wraps exactly these three); date and timetz keep
// their text in every style.
type TimeStyle uint8

// The time styles.
const (
	// TimeLegacy is edition 1: "2024-01-02 03:04:05.123Z" for timestamptz
	// (fraction trimmed), Postgres's own text for timestamp and time.
	TimeLegacy TimeStyle = iota
	// TimeISOMicros is "2024-01-02T03:04:05.123000Z", "…05.000000" and
	// "12:13:14.000000": six digits, Postgres's precision, always present.
	TimeISOMicros
	// TimeISOMillis truncates (never rounds) the fraction to three digits.
	TimeISOMillis
	// TimeISOSeconds drops the fraction and its point.
	TimeISOSeconds
)

// TimeStyleFor maps the rules' options to a style: iso is
// timestamps_iso8601, digits the sub-second digits timestamp_max_precision
// allows (6 or more for no limit: Postgres has microseconds at most).
func TimeStyleFor(iso bool, digits int) TimeStyle {
	switch {
	case !iso:
		return TimeLegacy
	case digits <= 0:
		return TimeISOSeconds
	case digits <= 3:
		return TimeISOMillis
	}
	return TimeISOMicros
}

// digits is the number of sub-second digits an ISO style prints.
func (s TimeStyle) digits() int {
	switch s {
	case TimeISOMillis:
		return 3
	case TimeISOSeconds:
		return 0
	}
	return 6
}

// WithTimeStyle returns t with every column rendering temporal values in
// style s. Columns is copied, so infos shared with other rules (another
// group, another edition) are not affected.
func (t TableInfo) WithTimeStyle(s TimeStyle) TableInfo {
	cols := make([]Column, len(t.Columns))
	for i, c := range t.Columns {
		c.Times = s
		cols[i] = c
	}
	t.Columns = cols
	return t
}

// appendISOFraction appends the sub-second part of an ISO style from the
// fraction's digits as the source printed them (frac, possibly empty or
// with trailing zeros trimmed): padded with zeros or truncated to the
// style's digits, with no point at all for TimeISOSeconds.
func appendISOFraction(dst, frac []byte, s TimeStyle) []byte {
	n := s.digits()
	if n == 0 {
		return dst
	}
	dst = append(dst, '.')
	if len(frac) >= n {
		return append(dst, frac[:n]...)
	}
	dst = append(dst, frac...)
	for i := len(frac); i < n; i++ {
		dst = append(dst, '0')
	}
	return dst
}

// appendTimestampISO converts Postgres's text of a timestamp without time
// zone ("2024-01-02 03:04:05.5", "infinity") to an ISO style. ok is false
// for text PowerSync maps to NULL: anything but "date time[.fraction]",
// which includes BC dates.
func appendTimestampISO(dst, s []byte, st TimeStyle) (out []byte, ok bool) {
	switch string(s) {
	case "infinity":
		s = []byte("9999-12-31 23:59:59")
	case "-infinity":
		s = []byte("0000-01-01 00:00:00")
	}
	sp := spanOf(s, 0, isDateByte)
	if sp == 0 || sp == len(s) || s[sp] != ' ' {
		return dst, false
	}
	dst = append(dst, s[:sp]...)
	dst = append(dst, 'T')
	out, ok = appendTimeISO(dst, s[sp+1:], st)
	if !ok {
		return dst[:len(dst)-sp-1], false
	}
	return out, true
}

// appendTimeISO converts Postgres's text of a time ("12:13:14",
// "12:13:14.5") to an ISO style. ok is false for any other text.
func appendTimeISO(dst, s []byte, st TimeStyle) (out []byte, ok bool) {
	end := spanOf(s, 0, isClockByte)
	if end == 0 {
		return dst, false
	}
	var frac []byte
	if end < len(s) {
		if s[end] != '.' {
			return dst, false
		}
		fe := spanOf(s, end+1, isDigit)
		if fe == end+1 || fe != len(s) {
			return dst, false
		}
		frac = s[end+1:]
	}
	dst = append(dst, s[:end]...)
	return appendISOFraction(dst, frac, st), true
}

// appendTemporalISO converts the text of a codecTimestamp or codecTime
// value to ISO style st; ok is false for a NULL result.
func appendTemporalISO(dst []byte, c codec, s []byte, st TimeStyle) ([]byte, bool) {
	if c == codecTime {
		return appendTimeISO(dst, s, st)
	}
	return appendTimestampISO(dst, s, st)
}

// spanOf returns the index of the first byte at or after i that is not in
// the class.
func spanOf(s []byte, i int, in func(byte) bool) int {
	for i < len(s) && in(s[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isDateByte(c byte) bool  { return isDigit(c) || c == '-' }
func isClockByte(c byte) bool { return isDigit(c) || c == ':' }
