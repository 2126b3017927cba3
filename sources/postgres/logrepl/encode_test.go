package logrepl

import (
	"encoding/binary"
	"time"
)

// A minimal pgoutput v1 encoder for unit and fuzz tests, written from the
// protocol documentation ("Logical Replication Message Formats").

type enc []byte

func (e enc) u8(v byte) enc      { return append(e, v) }
func (e enc) u16(v uint16) enc   { return binary.BigEndian.AppendUint16(e, v) }
func (e enc) u32(v uint32) enc   { return binary.BigEndian.AppendUint32(e, v) }
func (e enc) u64(v uint64) enc   { return binary.BigEndian.AppendUint64(e, v) }
func (e enc) str(s string) enc   { return append(append(e, s...), 0) }
func (e enc) bytes(b []byte) enc { return append(e, b...) }

// pgEpoch is 2000-01-01, the origin of protocol timestamps.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func encBegin(final LSN, at time.Time, xid uint32) []byte {
	return enc{'B'}.u64(uint64(final)).u64(uint64(at.Sub(pgEpoch).Microseconds())).u32(xid)
}

func encCommit(commit, end LSN, at time.Time) []byte {
	return enc{'C'}.u8(0).u64(uint64(commit)).u64(uint64(end)).u64(uint64(at.Sub(pgEpoch).Microseconds()))
}

func encRelation(r *Relation) []byte {
	e := enc{'R'}.u32(r.ID).str(r.Namespace).str(r.Name).u8(r.ReplicaIdentity).u16(uint16(len(r.Columns)))
	for _, c := range r.Columns {
		var flags byte
		if c.Key {
			flags = 1
		}
		e = e.u8(flags).str(c.Name).u32(c.TypeOID).u32(uint32(c.TypeMod))
	}
	return e
}

func encTuple(e enc, cols []Col) enc {
	e = e.u16(uint16(len(cols)))
	for _, c := range cols {
		e = e.u8(c.Kind)
		if c.Kind == ColText || c.Kind == ColBinary {
			e = e.u32(uint32(len(c.Data))).bytes(c.Data)
		}
	}
	return e
}

func encInsert(rel uint32, cols []Col) []byte {
	return encTuple(enc{'I'}.u32(rel).u8('N'), cols)
}

func encUpdate(rel uint32, oldKind byte, old, cols []Col) []byte {
	e := enc{'U'}.u32(rel)
	if oldKind != OldNone {
		e = encTuple(e.u8(oldKind), old)
	}
	return encTuple(e.u8('N'), cols)
}

func encDelete(rel uint32, oldKind byte, old []Col) []byte {
	return encTuple(enc{'D'}.u32(rel).u8(oldKind), old)
}

func encTruncate(opts byte, rels ...uint32) []byte {
	e := enc{'T'}.u32(uint32(len(rels))).u8(opts)
	for _, r := range rels {
		e = e.u32(r)
	}
	return e
}

func encMessage(transactional bool, lsn LSN, prefix string, content []byte) []byte {
	var flags byte
	if transactional {
		flags = 1
	}
	return enc{'M'}.u8(flags).u64(uint64(lsn)).str(prefix).u32(uint32(len(content))).bytes(content)
}

func encType(oid uint32, ns, name string) []byte { return enc{'Y'}.u32(oid).str(ns).str(name) }

func encOrigin(lsn LSN, name string) []byte { return enc{'O'}.u64(uint64(lsn)).str(name) }

func text(s string) Col { return Col{Kind: ColText, Data: []byte(s)} }

var null = Col{Kind: ColNull}

// testRel is a two-column table (id int key, name text).
func testRel(id uint32) *Relation {
	return &Relation{ID: id, Namespace: "public", Name: "items", ReplicaIdentity: IdentityDefault,
		Columns: []Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "name", TypeOID: 25, TypeMod: -1}}}
}
