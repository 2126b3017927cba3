package logrepl

import "fmt"

// Row changes are nearly every message a stream carries, so the decoder
// reads Insert, Update and Delete itself instead of through pglogrepl.Parse,
// which allocates the message, each tuple, each column and a copy of each
// value. Here the values of many rows share one arena chunk and the columns
// of many tuples share one slice: a few allocations per chunk, not per row.
// The layout checks use checkFrame's frameReader, so a malformed message is
// the same kind of protocol error; dml_test.go compares this decoding with
// pglogrepl's on arbitrary input.

const (
	valueChunk = 64 << 10 // bytes per arena chunk of column values
	colChunk   = 1024     // Cols per shared column slice
)

// dmlFrame is a decoded Insert, Update or Delete message.
type dmlFrame struct {
	relation uint32
	oldKind  byte // OldNone, OldKey or OldFull
	old, new Tuple
}

// parseDML decodes an 'I', 'U' or 'D' message (data[0]; the caller checks
// it) of protocol version 1.
func (d *decoder) parseDML(data []byte) (dmlFrame, error) {
	var f dmlFrame
	r := frameReader{b: data[1:]}
	f.relation = r.uint32()
	switch data[0] {
	case 'I': // relation, 'N', tuple
		r.expect('N')
		f.new = d.tuple(&r)
	case 'U': // relation, optional 'K'/'O' tuple, 'N' tuple
		switch c := r.byte1(); c {
		case OldKey, OldFull:
			f.oldKind = c
			f.old = d.tuple(&r)
			r.expect('N')
		case 'N':
		default:
			r.fail("update tuple marker")
		}
		f.new = d.tuple(&r)
	case 'D': // relation, 'K'/'O', tuple
		switch c := r.byte1(); c {
		case OldKey, OldFull:
			f.oldKind = c
		default:
			r.fail("delete tuple marker")
		}
		f.old = d.tuple(&r)
	}
	if r.err != nil {
		return dmlFrame{}, fmt.Errorf("malformed pgoutput %q message: %w", data[0], r.err)
	}
	return f, nil
}

// tuple reads a TupleData: column count, then per column a kind byte and,
// for text and binary values, a length and that many bytes, which are
// copied into the arena (the message is the connection's receive buffer).
func (d *decoder) tuple(r *frameReader) Tuple {
	n := r.uint16()
	if r.err != nil {
		return Tuple{}
	}
	if n > len(r.b) { // every column takes at least its kind byte
		r.fail("column count")
		return Tuple{}
	}
	if n == 0 {
		return Tuple{Columns: []Col{}} // present, unlike an absent old tuple
	}
	cols := d.columns(n)
	for i := range cols {
		switch k := r.byte1(); k {
		case ColNull, ColUnchanged:
			cols[i] = Col{Kind: k}
		case ColText, ColBinary:
			l := r.uint32()
			if r.err != nil || uint64(l) > uint64(len(r.b)) {
				r.fail("column value")
				return Tuple{}
			}
			cols[i] = Col{Kind: k, Data: d.keep(r.b[:l])}
			r.b = r.b[l:]
		default:
			r.fail("column kind")
			return Tuple{}
		}
	}
	return Tuple{Columns: cols}
}

// keep copies b into the value arena. A full chunk is left to the changes
// that point into it and a new one started: chunks are never reused, so a
// value stays valid for as long as anyone holds it. A value bigger than a
// chunk gets an allocation of its own instead: as the arena it would stay
// alive, at its size, until the next value arrives — on an idle stream,
// for good. For the same reason the column slice that will point to it is
// given up: the next tuple starts a new one.
func (d *decoder) keep(b []byte) []byte {
	if len(b) > valueChunk {
		d.cols = nil
		return append(make([]byte, 0, len(b)), b...)
	}
	if len(b) > cap(d.values)-len(d.values) {
		d.values = make([]byte, 0, valueChunk)
	}
	at := len(d.values)
	d.values = append(d.values, b...)
	return d.values[at:len(d.values):len(d.values)]
}

// columns returns n zeroed Cols from the shared column slice.
func (d *decoder) columns(n int) []Col {
	if n > cap(d.cols)-len(d.cols) {
		d.cols = make([]Col, 0, max(colChunk, n))
	}
	at := len(d.cols)
	d.cols = d.cols[:at+n]
	return d.cols[at : at+n : at+n]
}

// dmlMessage turns a row change message into a Change of the open
// transaction.
func (d *decoder) dmlMessage(walStart LSN, data []byte) error {
	f, err := d.parseDML(data)
	if err != nil {
		return malformed(err)
	}
	c := Change{LSN: walStart, OldKind: f.oldKind, New: f.new, Old: f.old}
	what := "INSERT"
	switch data[0] {
	case 'I':
		c.Kind = Insert
	case 'U':
		c.Kind, what = Update, "UPDATE"
	case 'D':
		c.Kind, what = Delete, "DELETE"
	}
	if c.Relation, err = d.dml(what, f.relation); err != nil {
		return err
	}
	for _, t := range []Tuple{c.New, c.Old} {
		if t.Columns != nil && len(t.Columns) != len(c.Relation.Columns) {
			return protocolError("tuple of %d columns for %s.%s, which has %d",
				len(t.Columns), c.Relation.Namespace, c.Relation.Name, len(c.Relation.Columns))
		}
	}
	d.add(c, len(data))
	return nil
}
