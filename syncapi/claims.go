package syncapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxDateSeconds is 9999-12-31T23:59:59Z: dates beyond it (either way)
// are shown as numbers, since RFC 3339 has no room for them.
const maxDateSeconds = 253402300799

// numericDate reads a NumericDate claim (RFC 7519 §2: seconds since
// 1970, fractions allowed) as float seconds; present is false when the
// claim is absent or null. The claims are compared as float seconds, not
// as time.Time: converting 1e300 seconds to a time overflows int64 (the
// JWT library's own conversion turned exp = 1e300 into a date in the
// past, and the token was refused as "expired"). A number too large even
// for a float64 (1e400) is ±Inf, which the comparisons order correctly.
func numericDate(c jwt.MapClaims, name string) (secs float64, present bool, err error) {
	v, ok := c[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	n, isNumber := v.(json.Number) // the parser decodes numbers as json.Number
	if !isNumber {
		return 0, true, fmt.Errorf("%s must be a number of seconds since 1970, got %s", name, jsonTypeOf(v))
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, true, fmt.Errorf("%s %q is not a number: %w", name, string(n), err)
	}
	return f, true, nil
}

// jsonTypeOf names the JSON type of a decoded claim, for messages.
func jsonTypeOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// formatDate shows a NumericDate in messages: RFC 3339 when it is a
// real date, else the number the token carries.
func formatDate(secs float64) string {
	if math.Abs(secs) > maxDateSeconds || math.IsNaN(secs) {
		return strconv.FormatFloat(secs, 'g', -1, 64) + " (seconds since 1970)"
	}
	return secondsToTime(secs).UTC().Format(time.RFC3339)
}

// formatSeconds shows a span of seconds: as a duration when it fits one.
func formatSeconds(secs float64) string {
	if math.Abs(secs) < float64(math.MaxInt64/int64(time.Second)) {
		return (time.Duration(secs * float64(time.Second))).String()
	}
	return strconv.FormatFloat(secs, 'g', -1, 64) + "s"
}

// secondsToTime converts seconds since 1970; callers have bounded secs
// (within maxDateSeconds), so the int64 conversions cannot overflow.
func secondsToTime(secs float64) time.Time {
	whole := math.Floor(secs)
	return time.Unix(int64(whole), int64((secs-whole)*1e9))
}

// timeSeconds is t as float seconds since 1970.
func timeSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}

// checkCrit applies the crit header (RFC 7515 §4.1.11): a token that
// names extensions its recipient must understand is refused unless the
// recipient implements them all, and this server implements none. Before
// this check such tokens were accepted, their extensions ignored.
func checkCrit(header map[string]any) error {
	v, ok := header["crit"]
	if !ok {
		return nil
	}
	list, isList := v.([]any)
	if !isList || len(list) == 0 {
		return errors.New("the crit header must be a non-empty array of header parameter names (RFC 7515 §4.1.11)")
	}
	names := make([]string, 0, len(list))
	for _, n := range list {
		s, isString := n.(string)
		if !isString {
			return fmt.Errorf("the crit header must list header parameter names (strings), got %s", jsonTypeOf(n))
		}
		names = append(names, s)
	}
	return fmt.Errorf("token requires the JWS extensions %q (crit header), which this server does not implement: sign tokens without crit", names)
}
