package syncrules

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
)

// Output is one row placed in one bucket: the input of the op build stage.
type Output struct {
	Bucket     string // "<group>#<definition>[params]"
	Definition string // bucket definition name
	ObjectType string // table alias or source table name
	ObjectID   string // the "id" output column as text ("" if missing)
	// Data is the output row as JSON text, byte-exact with PowerSync (it is
	// hashed into the op checksum). It aliases the buf passed to
	// EvaluateRow; outputs of the same query for the same row share it.
	Data     []byte
	Priority int // definition priority (0 highest … 3 default)
}

// LookupEntry is one parameter lookup produced by a parameter-table row at
// replication time: storage keeps Rows under Key (versioned by op id), and
// sync requests find them by Key.
type LookupEntry struct {
	// Key is the canonical lookup key: compact JSON array text
	// ["<definition>","<query id>",value...], strings JSON-escaped and
	// numbers normalised (REAL 1.0 and INTEGER 1 both encode as 1).
	Key []byte
	// Rows is the JSON array of parameter rows, e.g. [{"list_id":"a1"}]
	// (REAL values keep PowerSync's "1.0" form; blobs are dropped).
	Rows []byte
}

// Evaluator evaluates rows of one bound table. It is not safe for
// concurrent use; create one per goroutine with BoundTable.NewEvaluator.
type Evaluator struct {
	t       *BoundTable
	arena   setArena
	vals    []model.Value
	present []bool
	scratch []byte
	ctx     evalCtx
}

var errRowWidth = errors.New("row has the wrong number of columns")

// EvaluateRow places a source row (values in bound column order) into
// buckets. It appends one Output per (data query, bucket) to out and the
// outputs' JSON to buf, and returns both. Steady state allocates only the
// bucket id strings of parameterised buckets (and id text for non-TEXT
// ids). If some queries fail on this row, their outputs are missing and the
// returned error (EvalErrors joined) says which; other outputs are valid.
func (e *Evaluator) EvaluateRow(row []model.Value, out []Output, buf []byte) ([]Output, []byte, error) {
	if len(row) != len(e.t.columns) {
		return out, buf, fmt.Errorf("%s: %w (got %d, want %d)", e.t.table, errRowWidth, len(row), len(e.t.columns))
	}
	e.ctx = evalCtx{row: row}
	var errs []error
	for _, bd := range e.t.data {
		var err error
		out, buf, err = e.evalData(bd, out, buf)
		if err != nil {
			errs = append(errs, &EvalError{Bucket: bd.q.def.name, Query: bd.q.label, Err: err})
		}
	}
	return out, buf, errors.Join(errs...)
}

func (e *Evaluator) evalData(bd *boundData, out []Output, buf []byte) ([]Output, []byte, error) {
	e.arena.reset(bd.nslots)
	lo, hi, err := bd.filter.filter(&e.ctx, &e.arena)
	if err != nil || lo == hi {
		return out, buf, err
	}
	start := len(buf)
	buf, id, err := e.writeData(bd, buf)
	if err != nil {
		return out, buf[:start], err
	}
	data := buf[start:len(buf):len(buf)]
	q := bd.q
	if len(q.slots) == 0 {
		// No parameters: the one bucket id is precomputed.
		return append(out, Output{Bucket: q.def.globalID, Definition: q.def.name, ObjectType: q.outName,
			ObjectID: id, Data: data, Priority: q.def.priority}), buf, nil
	}
	first := len(out)
outer:
	for i := lo; i < hi; i++ {
		b := append(e.scratch[:0], q.def.prefix...)
		b = append(b, '[')
		ok := true
		for j, s := range q.slots {
			v, set := model.Value{}, false
			if s >= 0 {
				v, set = e.arena.get(i, s)
			}
			if j > 0 {
				b = append(b, ',')
			}
			if b, ok = appendParamValue(b, v); !ok || !set {
				ok = false
				break
			}
		}
		e.scratch = b
		if !ok {
			continue // NULL parameters never produce a bucket
		}
		b = append(b, ']')
		e.scratch = b
		for _, prev := range out[first:] {
			if prev.Bucket == string(b) {
				continue outer // the same bucket reached twice (OR, repeated array elements)
			}
		}
		out = append(out, Output{Bucket: string(b), Definition: q.def.name, ObjectType: q.outName,
			ObjectID: id, Data: data, Priority: q.def.priority})
	}
	return out, buf, nil
}

// writeData evaluates the SELECT list and appends the row JSON.
func (e *Evaluator) writeData(bd *boundData, buf []byte) ([]byte, string, error) {
	n := len(bd.keys)
	vals, present := e.vals[:n], e.present[:n]
	for i := range present {
		present[i] = false
	}
	row := e.ctx.row
	for _, st := range bd.steps {
		switch {
		case st.star:
			if present[st.slot] && !vals[st.slot].IsNull() {
				continue
			}
			vals[st.slot], present[st.slot] = row[st.col], true
		case st.skip:
			// undefined: leaves an earlier value (or absence) in place
		default:
			v, err := st.e.eval(&e.ctx)
			if err != nil {
				return buf, "", err
			}
			vals[st.slot], present[st.slot] = v, true
		}
	}
	buf = append(buf, '{')
	first := true
	for i := 0; i < n; i++ {
		if !present[i] || vals[i].Kind() == model.KindBlob {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(buf, bd.keys[i]...)
		buf = appendDataValue(buf, vals[i])
	}
	buf = append(buf, '}')
	id := ""
	if s := bd.idSlot; s >= 0 && present[s] {
		switch v := vals[s]; v.Kind() {
		case model.KindText:
			id = v.Str()
		case model.KindInteger, model.KindReal:
			id = textOf(v)
		}
	}
	return buf, id, nil
}

// appendDataValue writes a value into row data JSON like PowerSync's
// JSONBig.stringify: INTEGER as digits, REAL as JavaScript prints it with
// ".0" added to integral values, TEXT JSON-escaped.
func appendDataValue(b []byte, v model.Value) []byte {
	switch v.Kind() {
	case model.KindInteger:
		return strconv.AppendInt(b, v.Int64(), 10)
	case model.KindReal:
		return appendJSONBigNumber(b, v.Float64())
	case model.KindText:
		return model.AppendJSONString(b, v.Str())
	}
	return append(b, "null"...)
}

// appendParamValue writes a bucket parameter into a bucket id as
// PowerSync's bucket name serializer does (JSON.stringify of the value:
// REAL 1.0 and INTEGER 1 both give 1, NULL gives null). BLOB is not a
// valid parameter.
func appendParamValue(b []byte, v model.Value) ([]byte, bool) {
	switch v.Kind() {
	case model.KindInteger:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case model.KindReal:
		return model.AppendJSONNumber(b, v.Float64()), true
	case model.KindText:
		return model.AppendJSONString(b, v.Str()), true
	case model.KindNull:
		return append(b, "null"...), true
	case model.KindJSON:
		return append(b, v.JSONText()...), true
	}
	return b, false
}

// appendLookupValue writes a lookup key component as PowerSync serializes
// lookups (JSONBig of the normalised values): integral REALs as the exact
// integer they hold, so that both sides of a lookup agree, other REALs as
// JavaScript prints them (NaN and Infinity included).
func appendLookupValue(b []byte, v model.Value) ([]byte, bool) {
	if v.Kind() == model.KindReal {
		f := v.Float64()
		if f == math.Trunc(f) && !math.IsInf(f, 0) {
			if f == 0 {
				return append(b, '0'), true
			}
			return strconv.AppendFloat(b, f, 'f', 0, 64), true
		}
		return model.AppendJSNumber(b, f), true
	}
	return appendParamValue(b, v)
}

// EvaluateParameterRow turns a row of a parameter table into lookup
// entries, appended to out (their bytes to buf). A row that matches no
// parameter query yields nothing; storage then records an empty "[]" for
// lookups the row produced before.
func (e *Evaluator) EvaluateParameterRow(row []model.Value, out []LookupEntry, buf []byte) ([]LookupEntry, []byte, error) {
	if len(row) != len(e.t.columns) {
		return out, buf, fmt.Errorf("%s: %w (got %d, want %d)", e.t.table, errRowWidth, len(row), len(e.t.columns))
	}
	e.ctx = evalCtx{row: row}
	var errs []error
	for _, bp := range e.t.params {
		e.arena.reset(bp.nslots)
		lo, hi, err := bp.filter.filter(&e.ctx, &e.arena)
		if err != nil {
			errs = append(errs, &EvalError{Bucket: bp.q.def.name, Query: bp.q.label, Err: err})
			continue
		}
		if lo == hi {
			continue
		}
		rs := len(buf)
		buf = append(buf, '[', '{')
		for i, idx := range bp.colIdx {
			v := model.Null()
			if idx >= 0 {
				v = row[idx]
			}
			if v.Kind() == model.KindBlob {
				continue
			}
			if buf[len(buf)-1] != '{' {
				buf = append(buf, ',')
			}
			buf = append(buf, bp.keys[i]...)
			buf = appendDataValue(buf, v)
		}
		buf = append(buf, '}', ']')
		rows := buf[rs:len(buf):len(buf)]
		for i := lo; i < hi; i++ {
			ks := len(buf)
			buf = append(buf, bp.keyHead...)
			ok := true
			for _, p := range bp.q.filter.params {
				v, set := e.arena.get(i, p.slot)
				buf = append(buf, ',')
				if buf, ok = appendLookupValue(buf, v); !ok || !set {
					ok = false
					break
				}
			}
			if !ok {
				buf = buf[:ks]
				continue
			}
			buf = append(buf, ']')
			out = append(out, LookupEntry{Key: buf[ks:len(buf):len(buf)], Rows: rows})
		}
	}
	out, buf = e.evalLookups(row, out, buf)
	return out, buf, errors.Join(errs...)
}
