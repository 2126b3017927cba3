package syncrules

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/syncpipe/syncpipe/model"
)

// jkind is the type of a parsed JSON value.
type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

// jval is a parsed JSON value. Numbers keep their source text so that
// integers too large for int64 and integer-vs-float distinctions survive,
// as PowerSync's lossless JSON parser (JSONBig) preserves them.
type jval struct {
	k     jkind
	b     bool
	isInt bool   // number without fraction or exponent
	s     string // string value, or number text
	arr   []jval
	keys  []string
	vals  []jval
}

const maxJSONDepth = 256

var errJSONSyntax = errors.New("invalid JSON")

// parseJSON parses strict JSON (RFC 8259) text.
func parseJSON(s string) (jval, error) { return parseJSONWith(jparser{s: s}) }

// parseJSONBig parses JSON as PowerSync's lossless JSONBig.parse does,
// which also takes a number written with a leading dot (.5); the JSON
// functions and operators and IN use it, JSON.parse contexts parseJSON.
func parseJSONBig(s string) (jval, error) { return parseJSONWith(jparser{s: s, leadingDot: true}) }

func parseJSONWith(p jparser) (jval, error) {
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return jval{}, err
	}
	p.ws()
	if p.i != len(p.s) {
		return jval{}, fmt.Errorf("%w: trailing data at offset %d", errJSONSyntax, p.i)
	}
	return v, nil
}

type jparser struct {
	s          string
	i          int
	leadingDot bool
}

func (p *jparser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) fail() error {
	return fmt.Errorf("%w at offset %d", errJSONSyntax, p.i)
}

func (p *jparser) value(depth int) (jval, error) {
	if depth > maxJSONDepth {
		return jval{}, fmt.Errorf("%w: nested too deeply", errJSONSyntax)
	}
	if p.i >= len(p.s) {
		return jval{}, p.fail()
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		return jval{k: jStr, s: s}, err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '.' && p.leadingDot && p.i+1 < len(p.s) && p.s[p.i+1] >= '0' && p.s[p.i+1] <= '9':
		p.i++
		v, err := p.number()
		v.s, v.isInt = "."+v.s, false
		return v, err
	case p.lit("true"):
		return jval{k: jBool, b: true}, nil
	case p.lit("false"):
		return jval{k: jBool}, nil
	case p.lit("null"):
		return jval{k: jNull}, nil
	}
	return jval{}, p.fail()
}

func (p *jparser) lit(w string) bool {
	if len(p.s)-p.i >= len(w) && p.s[p.i:p.i+len(w)] == w {
		p.i += len(w)
		return true
	}
	return false
}

func (p *jparser) object(depth int) (jval, error) {
	v := jval{k: jObj}
	p.i++
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return jval{}, p.fail()
		}
		key, err := p.str()
		if err != nil {
			return jval{}, err
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return jval{}, p.fail()
		}
		p.i++
		p.ws()
		el, err := p.value(depth + 1)
		if err != nil {
			return jval{}, err
		}
		if j := v.index(key); j >= 0 {
			v.vals[j] = el // like JSON.parse: last duplicate wins, first position kept
		} else {
			v.keys = append(v.keys, key)
			v.vals = append(v.vals, el)
		}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return v, nil
		}
		return jval{}, p.fail()
	}
}

func (p *jparser) array(depth int) (jval, error) {
	v := jval{k: jArr}
	p.i++
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.ws()
		el, err := p.value(depth + 1)
		if err != nil {
			return jval{}, err
		}
		v.arr = append(v.arr, el)
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return v, nil
		}
		return jval{}, p.fail()
	}
}

func (p *jparser) number() (jval, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return jval{}, p.fail()
	}
	isInt := true
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		isInt = false
		if digits() == 0 {
			return jval{}, p.fail()
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		isInt = false
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return jval{}, p.fail()
		}
	}
	return jval{k: jNum, isInt: isInt, s: p.s[start:p.i]}, nil
}

func (p *jparser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := p.s[start:p.i]
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	buf := []byte(p.s[start:p.i])
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(buf), nil
		case c < 0x20:
			return "", p.fail()
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", p.fail()
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.fail()
				}
				if utf16.IsSurrogate(r) {
					if r2, ok2 := p.lowSurrogate(); ok2 {
						r = utf16.DecodeRune(r, r2)
					} else {
						r = utf8.RuneError // lone surrogate: not representable in UTF-8
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", p.fail()
			}
		default:
			buf = append(buf, c)
			p.i++
		}
	}
	return "", p.fail()
}

func (p *jparser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	v, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(v), true
}

func (p *jparser) lowSurrogate() (rune, bool) {
	if p.i+6 > len(p.s) || p.s[p.i] != '\\' || p.s[p.i+1] != 'u' {
		return 0, false
	}
	save := p.i
	p.i += 2
	r, ok := p.hex4()
	if !ok || r < 0xDC00 || r > 0xDFFF {
		p.i = save
		return 0, false
	}
	return r, true
}

func (v *jval) index(key string) int {
	for i, k := range v.keys {
		if k == key {
			return i
		}
	}
	return -1
}

// numFloat returns the number as a JavaScript double.
func (v *jval) numFloat() float64 {
	f, _ := strconv.ParseFloat(v.s, 64)
	return f
}

// jsMember looks up one path component the way JavaScript's value[c] does
// for parsed JSON: object keys, array indexes (and "length"), string
// characters. Prototype properties are not emulated.
func (v *jval) jsMember(c string) (jval, bool) {
	switch v.k {
	case jObj:
		if i := v.index(c); i >= 0 {
			return v.vals[i], true
		}
	case jArr:
		if c == "length" { // a JavaScript number: REAL
			return jval{k: jNum, s: strconv.Itoa(len(v.arr))}, true
		}
		if i, ok := arrayIndex(c); ok && i < len(v.arr) {
			return v.arr[i], true
		}
	case jStr:
		if c == "length" {
			return jval{k: jNum, s: strconv.Itoa(jsStringLen(v.s))}, true
		}
		if i, ok := arrayIndex(c); ok {
			u := utf16.Encode([]rune(v.s))
			if i < len(u) {
				return jval{k: jStr, s: string(utf16.Decode(u[i : i+1]))}, true
			}
		}
	}
	return jval{}, false
}

// arrayIndex parses a canonical array index ("0", "12", not "01" or "-1").
func arrayIndex(c string) (int, bool) {
	if c == "" || len(c) > 10 || (len(c) > 1 && c[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(c); i++ {
		if c[i] < '0' || c[i] > '9' {
			return 0, false
		}
		n = n*10 + int(c[i]-'0')
	}
	if n >= math.MaxUint32 {
		return 0, false
	}
	return n, true
}

// appendJSONBig serializes v as PowerSync's JSONBig.stringify would after
// parsing it. With jsNumbers the value came from JSON.parse (every number
// a double, so integral numbers print with ".0"); otherwise from the
// lossless parser (integers stay exact). Object keys that are array indexes
// come first in ascending order, as in any JavaScript object.
func appendJSONBig(dst []byte, v *jval, jsNumbers bool) []byte {
	return appendJSONBigOpt(dst, v, jsNumbers, false)
}

// appendJSONBigOpt is appendJSONBig; boolInts writes booleans as 1/0, as
// PowerSync does for nested request parameters (filterJsonData).
func appendJSONBigOpt(dst []byte, v *jval, jsNumbers, boolInts bool) []byte {
	switch v.k {
	case jNull:
		return append(dst, "null"...)
	case jBool:
		if boolInts {
			if v.b {
				return append(dst, '1')
			}
			return append(dst, '0')
		}
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case jStr:
		return model.AppendJSONString(dst, v.s)
	case jNum:
		if v.isInt && !jsNumbers {
			if v.s == "-0" {
				return append(dst, '0')
			}
			return append(dst, v.s...)
		}
		return appendJSONBigNumber(dst, v.numFloat())
	case jArr:
		dst = append(dst, '[')
		for i := range v.arr {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONBigOpt(dst, &v.arr[i], jsNumbers, boolInts)
		}
		return append(dst, ']')
	default:
		dst = append(dst, '{')
		for n, i := range jsKeyOrder(v.keys) {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = model.AppendJSONString(dst, v.keys[i])
			dst = append(dst, ':')
			dst = appendJSONBigOpt(dst, &v.vals[i], jsNumbers, boolInts)
		}
		return append(dst, '}')
	}
}

// appendJSONPlain serializes v as JSON.stringify writes what JSON.parse
// read: numbers as doubles (1.0 → 1), object keys in JavaScript order.
func appendJSONPlain(dst []byte, v *jval) []byte {
	switch v.k {
	case jNull:
		return append(dst, "null"...)
	case jBool:
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case jStr:
		return model.AppendJSONString(dst, v.s)
	case jNum:
		return model.AppendJSONNumber(dst, v.numFloat())
	case jArr:
		dst = append(dst, '[')
		for i := range v.arr {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONPlain(dst, &v.arr[i])
		}
		return append(dst, ']')
	}
	dst = append(dst, '{')
	for n, i := range jsKeyOrder(v.keys) {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = model.AppendJSONString(dst, v.keys[i])
		dst = append(dst, ':')
		dst = appendJSONPlain(dst, &v.vals[i])
	}
	return append(dst, '}')
}

// jsKeyOrder returns the property enumeration order of a JavaScript object
// with these keys: integer-like keys ascending, then the rest in insertion
// order.
func jsKeyOrder(keys []string) []int {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ia, oka := arrayIndex(keys[order[a]])
		ib, okb := arrayIndex(keys[order[b]])
		switch {
		case oka && okb:
			return ia < ib
		case oka:
			return true
		default:
			return false
		}
	})
	return order
}

// toSQLiteLegacy converts a JSON value extracted by json_extract/->> into a
// rule value with edition-1 semantics: objects, arrays and (quirk) null
// become JSON text, booleans 1/0, integers INTEGER, other numbers REAL.
func (v *jval) toSQLiteLegacy(jsNumbers bool) model.Value {
	switch v.k {
	case jBool:
		return model.Bool(v.b)
	case jStr:
		return model.Text(v.s)
	case jNum:
		if v.isInt && !jsNumbers {
			if i, err := strconv.ParseInt(v.s, 10, 64); err == nil {
				return model.Int(i)
			}
		}
		return model.Real(v.numFloat())
	default:
		return model.Text(string(appendJSONBig(nil, v, jsNumbers)))
	}
}
