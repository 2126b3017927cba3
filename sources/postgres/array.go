package postgres

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
)

// maxArrayDepth bounds nesting (Postgres allows 6 dimensions).
const maxArrayDepth = 6

var errBadArray = errors.New("malformed array literal")

// appendArrayJSON converts a Postgres array literal as array_out prints it
// ("{1,2}", "{{a,\"b c\"},{NULL,\"\"}}", "[0:1]={1,2}") into the JSON array
// PowerSync derives from it, element by element per elem (see DecodeText),
// temporal elements in style st.
func appendArrayJSON(dst, s []byte, elem codec, delim byte, st TimeStyle) ([]byte, error) {
	p := arrayParser{s: s, elem: elem, delim: delim, out: dst, times: st}
	p.skipSpace()
	if p.i < len(s) && s[p.i] == '[' { // explicit bounds: "[1:2][0:1]="
		for p.i < len(s) && s[p.i] != '=' {
			p.i++
		}
		if p.i == len(s) {
			return dst, errBadArray
		}
		p.i++
		p.skipSpace()
	}
	if err := p.array(0); err != nil {
		return dst, err
	}
	p.skipSpace()
	if p.i != len(s) {
		return dst, errBadArray
	}
	return p.out, nil
}

type arrayParser struct {
	s       []byte
	i       int
	elem    codec
	delim   byte
	times   TimeStyle
	out     []byte
	scratch []byte
}

func (p *arrayParser) skipSpace() {
	for p.i < len(p.s) && isArraySpace(p.s[p.i]) {
		p.i++
	}
}

func isArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func (p *arrayParser) array(depth int) error {
	if depth >= maxArrayDepth || p.i >= len(p.s) || p.s[p.i] != '{' {
		return errBadArray
	}
	p.i++
	p.out = append(p.out, '[')
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return errBadArray
		}
		var err error
		switch p.s[p.i] {
		case '{':
			err = p.array(depth + 1)
		case '"':
			err = p.quoted()
		default:
			err = p.unquoted()
		}
		if err != nil {
			return err
		}
		p.skipSpace()
		if p.i >= len(p.s) {
			return errBadArray
		}
		switch p.s[p.i] {
		case p.delim:
			p.i++
			p.out = append(p.out, ',')
		case '}':
			p.i++
			p.out = append(p.out, ']')
			return nil
		default:
			return errBadArray
		}
	}
}

func (p *arrayParser) quoted() error {
	p.i++ // opening quote
	p.scratch = p.scratch[:0]
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch c {
		case '\\':
			if p.i+1 >= len(p.s) {
				return errBadArray
			}
			p.scratch = append(p.scratch, p.s[p.i+1])
			p.i += 2
		case '"':
			p.i++
			return p.element(p.scratch)
		default:
			p.scratch = append(p.scratch, c)
			p.i++
		}
	}
	return errBadArray
}

func (p *arrayParser) unquoted() error {
	p.scratch = p.scratch[:0]
	escaped := false
	end := 0 // length of scratch up to the last non-space (or escaped) byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == p.delim || c == '}' {
			break
		}
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return errBadArray
			}
			p.scratch = append(p.scratch, p.s[p.i+1])
			p.i += 2
			escaped = true
			end = len(p.scratch)
			continue
		case c == '{' || c == '"':
			return errBadArray
		}
		p.scratch = append(p.scratch, c)
		if !isArraySpace(c) {
			end = len(p.scratch)
		}
		p.i++
	}
	v := p.scratch[:end]
	if len(v) == 0 {
		return errBadArray
	}
	if !escaped && len(v) == 4 && (v[0]|0x20) == 'n' && (v[1]|0x20) == 'u' && (v[2]|0x20) == 'l' && (v[3]|0x20) == 'l' {
		p.out = append(p.out, "null"...)
		return nil
	}
	return p.element(v)
}

// element appends one non-NULL element in its JSON form.
func (p *arrayParser) element(v []byte) error {
	switch p.elem {
	case codecInt2, codecInt4, codecInt8, codecOID:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return errBadArray
		}
		p.out = strconv.AppendInt(p.out, n, 10)
	case codecFloat4, codecFloat8:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return errBadArray
		}
		p.out = model.AppendJSONNumber(p.out, f)
	case codecBool:
		b, err := parseBoolText(v)
		if err != nil {
			return errBadArray
		}
		if b {
			p.out = append(p.out, '1')
		} else {
			p.out = append(p.out, '0')
		}
	case codecBytea:
		// PowerSync drops binary values from JSON: they serialise as null.
		if _, err := appendByteaText(nil, v); err != nil {
			return errBadArray
		}
		p.out = append(p.out, "null"...)
	case codecTimestamptz:
		start := len(p.out)
		p.out = append(p.out, '"')
		out, ok, err := decodeTimestamptzText(p.out, v, p.times)
		if err != nil {
			return errBadArray
		}
		if ok {
			p.out = append(out, '"')
		} else {
			p.out = append(p.out[:start], "null"...)
		}
	case codecTimestamp, codecTime:
		// PowerSync maps text it cannot read as a time to NULL; ISO text
		// needs no JSON escaping.
		if out, ok := appendTemporalISO(append(p.out, '"'), p.elem, v, p.times); ok {
			p.out = append(out, '"')
		} else {
			p.out = append(p.out, "null"...)
		}
	case codecJSON:
		if !json.Valid(v) {
			return errBadArray
		}
		p.out = append(p.out, v...)
	default:
		p.out = model.AppendJSONString(p.out, v)
	}
	return nil
}
