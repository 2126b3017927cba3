package syncrules

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"

	"github.com/syncpipe/syncpipe/model"
)

// builtin is a scalar SQL function with PowerSync's semantics.
type builtin struct {
	name    string
	minArgs int
	maxArgs int
	call    func(args []model.Value) (model.Value, error)
}

// builtins are the functions of SPEC §3 plus typeof, instr, json_valid
// and json_keys, which PowerSync also provides and cost nothing to
// support (its other functions are listed in doc.go).
var builtins = map[string]*builtin{}

func init() {
	for _, b := range []*builtin{
		{"upper", 1, 1, fnUpper},
		{"lower", 1, 1, fnLower},
		{"substring", 2, 3, fnSubstring},
		{"length", 1, 1, fnLength},
		{"hex", 1, 1, fnHex},
		{"base64", 1, 1, fnBase64},
		{"typeof", 1, 1, fnTypeof},
		{"instr", 2, 2, fnInstr},
		{"ifnull", 2, 2, fnIfnull},
		{"iif", 3, 3, fnIif},
		{"json_extract", 2, 2, fnJSONExtract},
		{"json_array_length", 1, 2, fnJSONArrayLength},
		{"json_valid", 1, 1, fnJSONValid},
		{"json_keys", 1, 1, fnJSONKeys},
	} {
		builtins[b.name] = b
	}
	for _, b := range []*builtin{
		{"json_extract", 2, 2, fnJSONExtractFixed},
		{"json_array_length", 1, 2, fnJSONArrayLengthFixed},
	} {
		fixedJSONBuiltins[b.name] = b
	}
}

// fixedJSONBuiltins replace builtins of the same name where
// fixed_json_extract is on (see jsonExtract).
var fixedJSONBuiltins = map[string]*builtin{}

// aggregates get a specific "not supported" message instead of "unknown".
var aggregates = map[string]bool{
	"count": true, "sum": true, "avg": true, "min": true, "max": true, "total": true,
	"group_concat": true, "string_agg": true, "array_agg": true, "json_agg": true,
	"json_group_array": true, "json_group_object": true, "bool_and": true, "bool_or": true,
}

// fnUpper and fnLower are JavaScript's toUpperCase/toLowerCase: full
// Unicode case mapping (ß → SS, final sigma), which x/text/cases does;
// ASCII takes the fast path.
func fnUpper(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Null(), nil
	}
	s := textOf(a[0])
	if isASCII(s) {
		return model.Text(strings.ToUpper(s)), nil
	}
	return model.Text(cases.Upper(language.Und).String(s)), nil
}

func fnLower(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Null(), nil
	}
	s := textOf(a[0])
	if isASCII(s) {
		return model.Text(strings.ToLower(s)), nil
	}
	return model.Text(cases.Lower(language.Und).String(s)), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// fnInstr is SQLite's instr as PowerSync implements it: the 1-based
// position of y in x (0 if absent), in bytes when both are BLOBs and in
// UTF-16 code units otherwise.
func fnInstr(a []model.Value) (model.Value, error) {
	x, y := a[0], a[1]
	if x.IsNull() || y.IsNull() {
		return model.Null(), nil
	}
	if x.Kind() == model.KindBlob && y.Kind() == model.KindBlob {
		return model.Int(int64(bytes.Index(x.Bytes(), y.Bytes()) + 1)), nil
	}
	hay, needle := textOf(x), textOf(y)
	i := strings.Index(hay, needle)
	if i < 0 {
		return model.Int(0), nil
	}
	return model.Int(int64(jsStringLen(hay[:i]) + 1)), nil
}

// fnSubstring follows PowerSync's SQLite-compatible substring on UTF-16
// code units: 1-based start, 0 and negative starts as in SQLite, negative
// lengths count backwards.
func fnSubstring(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Null(), nil
	}
	if a[1].IsNull() {
		return model.Null(), nil
	}
	text := textOf(a[0])
	startV, err := castInteger(a[1])
	if err != nil {
		return model.Value{}, err
	}
	start := startV.Int64()
	n := int64(jsStringLen(text))
	var length int64
	if len(a) == 3 {
		if a[2].IsNull() {
			return model.Null(), nil
		}
		l, err := castInteger(a[2])
		if err != nil {
			return model.Value{}, err
		}
		length = l.Int64()
	} else {
		length = n + 1
	}
	var realStart int64
	switch {
	case start < 0:
		realStart = max(0, n+start)
	case start == 0:
		realStart = 0
		length--
	default:
		realStart = start - 1
	}
	if length < 0 {
		return model.Text(jsSubstring(text, satAdd(realStart, length), realStart)), nil
	}
	return model.Text(jsSubstring(text, realStart, satAdd(realStart, length))), nil
}

func satAdd(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return 1<<63 - 1
		}
		return -1 << 63
	}
	return s
}

// jsSubstring is String.prototype.substring on UTF-16 code units: clamp to
// [0, len], swap if reversed.
func jsSubstring(s string, a, b int64) string {
	n := int64(jsStringLen(s))
	a, b = min(max(a, 0), n), min(max(b, 0), n)
	if a > b {
		a, b = b, a
	}
	if n == int64(len(s)) { // ASCII (or at least one byte per unit)
		return s[a:b]
	}
	u := utf16.Encode([]rune(s))
	return string(utf16.Decode(u[a:b]))
}

func fnLength(a []model.Value) (model.Value, error) {
	switch a[0].Kind() {
	case model.KindNull:
		return model.Null(), nil
	case model.KindBlob:
		return model.Int(int64(len(a[0].Bytes()))), nil
	}
	return model.Int(int64(jsStringLen(textOf(a[0])))), nil
}

func fnHex(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Text(""), nil
	}
	return model.Text(hexUpper(blobOf(a[0]))), nil
}

func fnBase64(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Text(""), nil
	}
	return model.Text(base64.StdEncoding.EncodeToString(blobOf(a[0]))), nil
}

func fnTypeof(a []model.Value) (model.Value, error) { return model.Text(a[0].Kind().String()), nil }

func fnIfnull(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return a[1], nil
	}
	return a[0], nil
}

func fnIif(a []model.Value) (model.Value, error) {
	if truthy(a[0]) {
		return a[1], nil
	}
	return a[2], nil
}

func fnJSONExtract(a []model.Value) (model.Value, error) {
	return jsonExtract(a[0], a[1], "json_extract", false)
}
func fnJSONExtractFixed(a []model.Value) (model.Value, error) {
	return jsonExtract(a[0], a[1], "json_extract", true)
}

func fnJSONArrayLength(a []model.Value) (model.Value, error)      { return jsonArrayLength(a, false) }
func fnJSONArrayLengthFixed(a []model.Value) (model.Value, error) { return jsonArrayLength(a, true) }

func jsonArrayLength(a []model.Value, fixed bool) (model.Value, error) {
	j := a[0]
	if len(a) == 2 && !a[1].IsNull() {
		v, err := jsonExtract(j, a[1], "json_extract", fixed)
		if err != nil {
			return model.Value{}, err
		}
		j = v
	}
	if j.IsNull() {
		return model.Null(), nil
	}
	doc, err := parseJSONBig(textOf(j))
	if err != nil {
		return model.Value{}, err
	}
	if doc.k != jArr {
		return model.Int(0), nil
	}
	return model.Int(int64(len(doc.arr))), nil
}

func fnJSONValid(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Int(0), nil
	}
	_, err := parseJSONBig(textOf(a[0]))
	return model.Bool(err == nil), nil
}

var errJSONKeys = errors.New("json_keys needs a JSON object")

func fnJSONKeys(a []model.Value) (model.Value, error) {
	if a[0].IsNull() {
		return model.Null(), nil
	}
	doc, err := parseJSONBig(textOf(a[0]))
	if err != nil {
		return model.Value{}, err
	}
	if doc.k != jObj {
		return model.Value{}, errJSONKeys
	}
	out := []byte{'['}
	for n, i := range jsKeyOrder(doc.keys) {
		if n > 0 {
			out = append(out, ',')
		}
		out = model.AppendJSONString(out, doc.keys[i])
	}
	return model.Text(string(append(out, ']'))), nil
}
