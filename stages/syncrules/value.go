package syncrules

import "github.com/syncpipe/syncpipe/model"

// truthy is PowerSync's sqliteBool: NULL and BLOB are false, numbers are
// true when non-zero, TEXT is true when JavaScript's parseInt gives a
// non-zero number.
func truthy(v model.Value) bool {
	switch v.Kind() {
	case model.KindInteger:
		return v.Int64() != 0
	case model.KindReal:
		f := v.Float64()
		return f != 0 && f == f
	case model.KindText:
		return jsParseIntTruthy(v.Str())
	default:
		return false
	}
}

var (
	valTrue  = model.Int(1)
	valFalse = model.Int(0)
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
