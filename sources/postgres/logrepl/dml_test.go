package logrepl

import (
	"bytes"
	"testing"

	"github.com/jackc/pglogrepl"
)

// FuzzParseDMLMatchesPglogrepl decodes arbitrary row change messages with
// the decoder's own reader and with pglogrepl.Parse, guarded by an
// independent layout check (refCheckDML, the check the pglogrepl path used
// for row changes): both must accept the same messages and, when they do,
// agree on relation, old tuple kind and every column's kind and bytes.
func FuzzParseDMLMatchesPglogrepl(f *testing.F) {
	for _, m := range [][]byte{
		encInsert(1, []Col{text("1"), null}),
		encInsert(7, []Col{text(""), {Kind: ColBinary, Data: []byte{0, 1}}}),
		encUpdate(1, OldKey, []Col{text("1"), null}, []Col{text("2"), {Kind: ColUnchanged}}),
		encUpdate(1, OldNone, nil, []Col{null, null}),
		encUpdate(1, OldFull, []Col{text("a"), text("b")}, []Col{text("c"), text("d")}),
		encDelete(1, OldKey, []Col{text("2"), null}),
		encDelete(1, OldFull, []Col{text("3"), text("x")}),
		{'I'}, {'U', 0, 0, 0, 1, 'N', 0, 1, 't', 0xff, 0xff, 0xff, 0xff},
	} {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || (data[0] != 'I' && data[0] != 'U' && data[0] != 'D') {
			return
		}
		d := newDecoder(0, nil)
		got, err := d.parseDML(data)
		refErr := refCheckDML(data)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("parseDML error %v, layout check error %v", err, refErr)
		}
		if err != nil {
			return
		}
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			// pglogrepl wants a minimum message length that only a tuple of
			// zero columns falls short of; the relation check catches that.
			if !bytes.Contains([]byte(err.Error()), []byte("must have")) {
				t.Fatalf("the layout check accepted what pglogrepl rejects: %v", err)
			}
			return
		}
		var want dmlFrame
		switch m := msg.(type) {
		case *pglogrepl.InsertMessage:
			want = dmlFrame{relation: m.RelationID, new: refTuple(m.Tuple)}
		case *pglogrepl.UpdateMessage:
			want = dmlFrame{relation: m.RelationID, oldKind: m.OldTupleType, old: refTuple(m.OldTuple), new: refTuple(m.NewTuple)}
		case *pglogrepl.DeleteMessage:
			want = dmlFrame{relation: m.RelationID, oldKind: m.OldTupleType, old: refTuple(m.OldTuple)}
		default:
			t.Fatalf("pglogrepl parsed %q as %T", data[0], msg)
		}
		if got.relation != want.relation || got.oldKind != want.oldKind {
			t.Fatalf("got relation %d old kind %q, pglogrepl %d %q", got.relation, got.oldKind, want.relation, want.oldKind)
		}
		sameTuple(t, "old", got.old, want.old)
		sameTuple(t, "new", got.new, want.new)
	})
}

// refCheckDML verifies the layout of an Insert, Update or Delete message
// (PostgreSQL "Logical Replication Message Formats", protocol version 1)
// without decoding it: the reference acceptance for parseDML.
func refCheckDML(data []byte) error {
	r := frameReader{b: data[1:]}
	tuple := func() {
		n := r.uint16()
		for i := 0; i < n && r.err == nil; i++ {
			switch r.byte1() {
			case 'n', 'u':
			case 't', 'b':
				l := r.uint32()
				if r.err == nil && uint64(l) > uint64(len(r.b)) {
					r.fail("column value")
					return
				}
				r.skip(int(l))
			default:
				r.fail("column kind")
			}
		}
	}
	r.skip(4)
	switch data[0] {
	case 'I':
		r.expect('N')
		tuple()
	case 'U':
		switch r.byte1() {
		case 'K', 'O':
			tuple()
			r.expect('N')
		case 'N':
		default:
			r.fail("update tuple marker")
		}
		tuple()
	case 'D':
		switch r.byte1() {
		case 'K', 'O':
		default:
			r.fail("delete tuple marker")
		}
		tuple()
	}
	return r.err
}

// refTuple is pglogrepl's tuple in this package's terms.
func refTuple(td *pglogrepl.TupleData) Tuple {
	if td == nil {
		return Tuple{}
	}
	cols := make([]Col, len(td.Columns))
	for i, c := range td.Columns {
		cols[i] = Col{Kind: c.DataType}
		if c.DataType == ColText || c.DataType == ColBinary {
			cols[i].Data = c.Data
		}
	}
	return Tuple{Columns: cols}
}

func sameTuple(t *testing.T, which string, got, want Tuple) {
	t.Helper()
	if (got.Columns == nil) != (want.Columns == nil) || len(got.Columns) != len(want.Columns) {
		t.Fatalf("%s tuple: %d columns (nil %v), pglogrepl %d (nil %v)", which,
			len(got.Columns), got.Columns == nil, len(want.Columns), want.Columns == nil)
	}
	for i := range got.Columns {
		g, w := got.Columns[i], want.Columns[i]
		if g.Kind != w.Kind || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("%s column %d: %q %q, pglogrepl %q %q", which, i, g.Kind, g.Data, w.Kind, w.Data)
		}
	}
}

// TestDecodedValuesOutliveTheReceiveBuffer checks that row values are
// copied out of the message: the stream reuses its receive buffer for the
// next message.
func TestDecodedValuesOutliveTheReceiveBuffer(t *testing.T) {
	d := newDecoder(0, []*Relation{testRel(1)})
	msg := encInsert(1, []Col{text("12345"), text("a name")})
	f, err := d.parseDML(msg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msg {
		msg[i] = 'x'
	}
	if got := string(f.new.Columns[0].Data) + "|" + string(f.new.Columns[1].Data); got != "12345|a name" {
		t.Fatalf("values after the buffer was overwritten: %q", got)
	}
	// A value cannot grow into its neighbour in the arena.
	if v := f.new.Columns[0].Data; cap(v) != len(v) {
		t.Fatalf("value has spare capacity %d", cap(v)-len(v))
	}
}
