package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/syncpipe/syncpipe/model"
)

// Type OIDs of the built-in types that do not decode to plain text.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidTimestamp   = 1114
	oidTime        = 1083
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

// codec says how a column's wire value becomes a rule value. It is chosen by
// the exact type OID, like PowerSync's type mapping: a domain over int4 is
// not int4 and decodes as text.
type codec uint8

const (
	codecText codec = iota // Postgres text form, as is
	codecInt2
	codecInt4
	codecInt8
	codecOID
	codecFloat4
	codecFloat8
	codecBool
	codecBytea
	codecUUID
	codecTimestamptz
	codecJSON  // only as an array element: embedded as JSON, not as a string
	codecArray // TEXT holding a JSON array
	// Only in the ISO time styles (in TimeLegacy these are codecText):
	codecTimestamp // timestamp without time zone, from its text
	codecTime      // time without time zone, from its text
)

func codecOf(oid uint32) codec {
	switch oid {
	case oidInt2:
		return codecInt2
	case oidInt4:
		return codecInt4
	case oidInt8:
		return codecInt8
	case oidOID:
		return codecOID
	case oidFloat4:
		return codecFloat4
	case oidFloat8:
		return codecFloat8
	case oidBool:
		return codecBool
	case oidBytea:
		return codecBytea
	case oidUUID:
		return codecUUID
	case oidTimestamptz:
		return codecTimestamptz
	case oidJSON, oidJSONB:
		return codecJSON
	}
	return codecText
}

// styledCodec is codecOf for values rendered in time style st: timestamp
// and time need converting only in the ISO styles, so edition 1 keeps
// copying their text as is.
func styledCodec(oid uint32, st TimeStyle) codec {
	if st != TimeLegacy {
		switch oid {
		case oidTimestamp:
			return codecTimestamp
		case oidTime:
			return codecTime
		}
	}
	return codecOf(oid)
}

func (c Column) codec() codec {
	if c.IsArray {
		return codecArray
	}
	if c := styledCodec(c.TypeOID, c.Times); c != codecJSON {
		return c
	}
	return codecText // json/jsonb columns are TEXT holding the JSON
}

// elemCodec is the codec of an array column's elements.
func (c Column) elemCodec() codec { return styledCodec(c.ElemOID, c.Times) }

func (c Column) elemDelim() byte {
	if c.ElemDelim == 0 {
		return ','
	}
	return c.ElemDelim
}

// binaryFormat reports whether the snapshot requests the column in binary.
func (c codec) binaryFormat() bool { return c >= codecInt2 && c <= codecTimestamptz }

var (
	errBadBinary = errors.New("malformed binary value")
	errBadBool   = errors.New("malformed boolean")
	errBadBytea  = errors.New("malformed bytea")
)

// DecodeText converts one column value in Postgres's text output format —
// what pgoutput sends — to its rule value (SPEC §3). data == nil is NULL.
// It expects the output settings of SessionParams (in particular
// extra_float_digits ≥ 1, DateStyle ISO and bytea_output hex; escape-format
// bytea is accepted too); timestamptz may carry any UTC offset.
//
// Arrays become TEXT holding a JSON array, decoded element by element as
// PowerSync does: integers as JSON numbers, floats as JavaScript prints them
// (NaN and ±Infinity as null), booleans as 1/0, json/jsonb elements embedded
// as JSON, timestamptz elements normalised like timestamptz columns, bytea
// elements as null, and every other element type as a JSON string of its
// text form. Unlike PowerSync, arrays of non-built-in element types (enums,
// domains, composites) are converted too rather than passed on as raw array
// literals, as SPEC §3 says every array becomes JSON.
func DecodeText(col Column, data []byte) (model.Value, error) {
	v, err := decodeText(col, col.codec(), data)
	if err != nil {
		return model.Null(), fmt.Errorf("decode column %s (%s) from text: %w", col.Name, col.TypeName, err)
	}
	return v, nil
}

func decodeText(col Column, c codec, data []byte) (model.Value, error) {
	if data == nil {
		return model.Null(), nil
	}
	switch c {
	case codecInt2, codecInt4, codecInt8, codecOID:
		n, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			return model.Null(), err
		}
		return model.Int(n), nil
	case codecFloat4, codecFloat8:
		f, err := strconv.ParseFloat(string(data), 64)
		if err != nil {
			return model.Null(), err
		}
		return model.Real(canonicalNaN(f)), nil
	case codecBool:
		b, err := parseBoolText(data)
		if err != nil {
			return model.Null(), err
		}
		return model.Bool(b), nil
	case codecBytea:
		b, err := appendByteaText(nil, data)
		if err != nil {
			return model.Null(), err
		}
		if b == nil {
			b = []byte{}
		}
		return model.Blob(b), nil
	case codecTimestamptz:
		b, ok, err := decodeTimestamptzText(nil, data, col.Times)
		if err != nil || !ok {
			return model.Null(), err
		}
		return model.Text(string(b)), nil
	case codecTimestamp, codecTime:
		b, ok := appendTemporalISO(nil, c, data, col.Times)
		if !ok {
			return model.Null(), nil
		}
		return model.Text(string(b)), nil
	case codecArray:
		b, err := appendArrayJSON(nil, data, col.elemCodec(), col.elemDelim(), col.Times)
		if err != nil {
			return model.Null(), err
		}
		return model.Text(string(b)), nil
	}
	return model.Text(string(data)), nil
}

// decodeBinaryScalar decodes the fixed-size binary types without
// allocating. For bytea, uuid and timestamptz it only validates and returns
// NULL; their bytes are produced by appendBinaryBytes.
func decodeBinaryScalar(c codec, data []byte) (model.Value, error) {
	switch c {
	case codecInt2:
		if len(data) == 2 {
			return model.Int(int64(int16(binary.BigEndian.Uint16(data)))), nil
		}
	case codecInt4:
		if len(data) == 4 {
			return model.Int(int64(int32(binary.BigEndian.Uint32(data)))), nil
		}
	case codecOID:
		if len(data) == 4 {
			return model.Int(int64(binary.BigEndian.Uint32(data))), nil
		}
	case codecInt8:
		if len(data) == 8 {
			return model.Int(int64(binary.BigEndian.Uint64(data))), nil
		}
	case codecFloat4:
		if len(data) == 4 {
			return model.Real(float4Value(math.Float32frombits(binary.BigEndian.Uint32(data)))), nil
		}
	case codecFloat8:
		if len(data) == 8 {
			return model.Real(canonicalNaN(math.Float64frombits(binary.BigEndian.Uint64(data)))), nil
		}
	case codecBool:
		if len(data) == 1 {
			return model.Bool(data[0] != 0), nil
		}
	case codecBytea:
		return model.Null(), nil
	case codecUUID:
		if len(data) == 16 {
			return model.Null(), nil
		}
	case codecTimestamptz:
		if len(data) == 8 {
			return model.Null(), nil
		}
	}
	return model.Null(), errBadBinary
}

// appendBinaryBytes appends the payload of a binary bytea (raw bytes), uuid
// or timestamptz (TEXT, in style st). ok is false for a NULL result.
func appendBinaryBytes(dst []byte, c codec, data []byte, st TimeStyle) (out []byte, ok bool, err error) {
	switch c {
	case codecBytea:
		return append(dst, data...), true, nil
	case codecUUID:
		if len(data) != 16 {
			return dst, false, errBadBinary
		}
		return appendUUID(dst, data), true, nil
	case codecTimestamptz:
		if len(data) != 8 {
			return dst, false, errBadBinary
		}
		out, ok = appendTimestamptzBinary(dst, int64(binary.BigEndian.Uint64(data)), st)
		return out, ok, nil
	}
	return dst, false, errBadBinary
}

// float4Value widens a float4 the way the text path sees it: Postgres prints
// the shortest decimal that round-trips as float4 ("1.1"), and parsing that
// as a double gives 1.1, not float64(float32(1.1)).
func float4Value(f float32) float64 {
	if f != f {
		return math.NaN()
	}
	if math.IsInf(float64(f), 0) || f == 0 {
		return float64(f)
	}
	var buf [32]byte
	v, err := strconv.ParseFloat(string(appendFloat4Postgres(buf[:0], f)), 64)
	if err != nil {
		return float64(f)
	}
	return v
}

// appendFloat4Postgres appends the digits Postgres's float4out prints for a
// finite, non-zero f (in 'e' notation). Postgres uses Ryu with the rounding
// interval's bounds excluded, whereas Go's shortest formatting includes them
// for even mantissas; the two differ only when Go's shortest decimal lies
// exactly on a bound, and then Postgres prints the shortest decimal strictly
// inside, which is the correctly rounded value at the first longer
// precision that falls inside.
func appendFloat4Postgres(dst []byte, f float32) []byte {
	start := len(dst)
	dst = strconv.AppendFloat(dst, float64(f), 'e', -1, 32)
	lo, hi := float4Bounds(f)
	if strictlyInside(dst[start:], lo, hi) {
		return dst
	}
	digits := 0
	for _, c := range dst[start:] {
		if c == 'e' {
			break
		}
		if c >= '0' && c <= '9' {
			digits++
		}
	}
	for p := digits + 1; p <= 9; p++ {
		dst = strconv.AppendFloat(dst[:start], float64(f), 'e', p-1, 32)
		if strictlyInside(dst[start:], lo, hi) {
			break
		}
	}
	return dst
}

// float4Bounds returns the midpoints between f and its float4 neighbours,
// which are exact in float64.
func float4Bounds(f float32) (lo, hi float64) {
	v := float64(f)
	prev := float64(math.Nextafter32(f, float32(math.Inf(-1))))
	next := float64(math.Nextafter32(f, float32(math.Inf(1))))
	if math.IsInf(prev, 0) {
		prev = v - (next - v)
	}
	if math.IsInf(next, 0) {
		next = v + (v - prev)
	}
	return (v + prev) / 2, (v + next) / 2
}

// strictlyInside reports whether the decimal s lies strictly between lo and
// hi. Float64 rounding is monotonic and lo, hi are exact, so only a decimal
// that rounds onto a bound needs an exact comparison.
func strictlyInside(s []byte, lo, hi float64) bool {
	d, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		return false
	}
	if d != lo && d != hi {
		return lo < d && d < hi
	}
	exact, ok := new(big.Rat).SetString(string(s))
	if !ok {
		return false
	}
	return exact.Cmp(new(big.Rat).SetFloat64(lo)) > 0 && exact.Cmp(new(big.Rat).SetFloat64(hi)) < 0
}

// canonicalNaN makes every NaN the same bits, so both paths agree exactly.
func canonicalNaN(f float64) float64 {
	if f != f {
		return math.NaN()
	}
	return f
}

func parseBoolText(data []byte) (bool, error) {
	switch string(data) {
	case "t", "true":
		return true, nil
	case "f", "false":
		return false, nil
	}
	return false, errBadBool
}

func appendUUID(dst, u []byte) []byte {
	const hex = "0123456789abcdef"
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hex[c>>4], hex[c&15])
	}
	return dst
}

// appendByteaText decodes bytea text output: hex ("\x0aff") or the legacy
// escape format (octal "\ooo" and "\\").
func appendByteaText(dst, s []byte) ([]byte, error) {
	if len(s) >= 2 && s[0] == '\\' && s[1] == 'x' {
		h := s[2:]
		if len(h)%2 != 0 {
			return dst, errBadBytea
		}
		for i := 0; i < len(h); i += 2 {
			hi, ok1 := unhex(h[i])
			lo, ok2 := unhex(h[i+1])
			if !ok1 || !ok2 {
				return dst, errBadBytea
			}
			dst = append(dst, hi<<4|lo)
		}
		return dst, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '\\':
			dst = append(dst, '\\')
			i++
		case i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) && s[i+1] <= '3':
			dst = append(dst, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
		default:
			return dst, errBadBytea
		}
	}
	return dst, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Decoder knows how each column of one table is decoded (its codec), and so
// which wire format the snapshot asks for (ResultFormats). It is immutable
// and safe for concurrent use.
type Decoder struct {
	codecs []codec
}

// NewDecoder returns a decoder for cols (in result-column order).
func NewDecoder(cols []Column) *Decoder {
	d := &Decoder{codecs: make([]codec, len(cols))}
	for i, c := range cols {
		d.codecs[i] = c.codec()
	}
	return d
}

// ResultFormats returns the per-column result formats the snapshot asks
// for: binary for int2/int4/int8/oid/float4/float8/bool/bytea/uuid/
// timestamptz, text for everything else. Pass it as the first query
// argument (pgx.QueryResultFormats).
func (d *Decoder) ResultFormats() pgx.QueryResultFormats {
	f := make(pgx.QueryResultFormats, len(d.codecs))
	for i, c := range d.codecs {
		if c.binaryFormat() {
			f[i] = pgx.BinaryFormatCode
		}
	}
	return f
}
