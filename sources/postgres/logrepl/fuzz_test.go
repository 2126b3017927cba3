package logrepl

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// FuzzDecoder feeds arbitrary message sequences to the decoder. Input is a
// series of frames, each a 2-byte big-endian length and that many bytes of
// pgoutput message. The decoder must never panic, must fail only with
// ErrProtocol, and everything it emits must be consistent: segments of one
// transaction in order (first … last, never interleaved), every tuple as
// wide as its relation, every RelationChanged with both shapes.
func FuzzDecoder(f *testing.F) {
	at := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	rel := testRel(1)
	wide := testRel(1)
	wide.ReplicaIdentity = IdentityFull
	for _, seq := range [][][]byte{
		{encRelation(rel)},
		{encBegin(0x100, at, 1), encRelation(rel), encInsert(1, []Col{text("1"), null}), encCommit(0x100, 0x130, at)},
		{encBegin(0x100, at, 1), encRelation(rel),
			encUpdate(1, OldKey, []Col{text("1"), null}, []Col{text("2"), {Kind: ColUnchanged}}),
			encDelete(1, OldKey, []Col{text("2"), null}), encTruncate(1, 1),
			encRelation(wide), encDelete(1, OldFull, []Col{text("3"), text("x")}),
			encCommit(0x100, 0x130, at), encMessage(false, 0x140, HeartbeatPrefix, []byte("ping"))},
		{encType(1, "a", "b"), encOrigin(0x10, "o"), encMessage(true, 1, "x", []byte("y")),
			encBegin(0x10, at, 2), encUpdate(1, OldNone, nil, []Col{null, null}), encCommit(0x10, 0x20, at)},
	} {
		f.Add(frames(seq...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := newDecoder(0x50, nil)
		d.segChanges = 2
		lsn := LSN(0x10)
		var out []segment
		for len(data) >= 2 {
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if n > len(data) {
				n = len(data)
			}
			msg := data[:n:n]
			data = data[n:]
			lsn += 8
			if err := d.message(lsn, msg); err != nil && !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			out = append(out, d.takeOut()...)
		}
		var open *Txn
		for i, s := range out {
			if s.txn == nil {
				if open != nil || s.pos == 0 || len(s.changes) != 0 {
					t.Fatalf("segment %d: position %s inside a transaction or with changes", i, s.pos)
				}
				continue
			}
			if s.first != (open == nil) || (!s.first && s.txn != open) {
				t.Fatalf("segment %d: transactions interleaved", i)
			}
			open = s.txn
			if s.last {
				open = nil
			}
			for _, c := range s.changes {
				checkChange(t, c)
			}
		}
	})
}

func checkChange(t *testing.T, c Change) {
	switch c.Kind {
	case Insert, Update, Delete:
		for _, tp := range []Tuple{c.New, c.Old} {
			if n := len(tp.Columns); n != 0 && n != len(c.Relation.Columns) {
				t.Fatalf("%s tuple of %d columns for a relation of %d", c.Kind, n, len(c.Relation.Columns))
			}
			for _, col := range tp.Columns {
				if (col.Data != nil) != (col.Kind == ColText || col.Kind == ColBinary) && len(col.Data) != 0 {
					t.Fatalf("column kind %q with data %q", col.Kind, col.Data)
				}
			}
		}
	case Truncate:
		for _, r := range c.TruncateRelations {
			if r == nil {
				t.Fatal("nil truncated relation")
			}
		}
	case RelationChanged:
		if c.Relation == nil || c.Previous == nil || c.Relation.Equal(c.Previous) {
			t.Fatal("RelationChanged without a real change")
		}
	default:
		t.Fatalf("unknown change kind %d", c.Kind)
	}
}

func frames(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}
