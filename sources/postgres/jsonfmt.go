package postgres

import (
	"math"

	"github.com/syncpipe/syncpipe/model"
)

// The JSON written for array columns must match what PowerSync writes, and
// PowerSync writes it with JavaScript's JSON.stringify; the rules engine
// already implements its number formatting and string escaping.

// appendJSNumber appends x as JSON.stringify writes a number: like
// Number::toString, except that non-finite numbers become null.
func appendJSNumber(dst []byte, x float64) []byte {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return append(dst, "null"...)
	}
	return model.AppendJSNumber(dst, x)
}

// appendJSString appends s as a JSON string the way JSON.stringify escapes
// it (quote, backslash and control characters; invalid UTF-8, which a UTF8
// database never produces, becomes U+FFFD).
func appendJSString(dst []byte, s []byte) []byte {
	return model.AppendJSONString(dst, s)
}
