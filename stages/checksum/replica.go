package checksum

import (
	"crypto/sha1"
	"encoding/binary"
	"math"

	"github.com/google/uuid"
)

// ReplicaNamespace is the UUIDv5 namespace PowerSync uses for replica ids.
var ReplicaNamespace = uuid.MustParse("a396dd91-09fc-4017-a28d-3df722f651e9")

// BSON element type tags used by ReplicaKey.
const (
	bsonDouble = 0x01
	bsonString = 0x02
	bsonBinary = 0x05
	bsonNull   = 0x0A
	bsonInt64  = 0x12
)

// ReplicaKey builds the BSON document {column: value, ...} of a row's
// replica-identity columns, which PowerSync hashes into the row's replica id.
// Append the columns in replica-identity order, then call UUID. The zero
// value is ready to use; Reset lets one key be reused per row without
// allocating.
//
// Value kinds follow PowerSync's row values: TEXT → BSON string, INTEGER
// (and booleans, which rules already turned into 1/0) → int64, REAL →
// double, NULL → null, BLOB → binary subtype 0. Bool is provided for
// completeness and encodes a BSON boolean.
type ReplicaKey struct {
	buf []byte
}

// Reset empties the key so it can be reused for the next row.
func (k *ReplicaKey) Reset() { k.buf = k.buf[:0] }

func (k *ReplicaKey) head(tag byte, name string) {
	if len(k.buf) == 0 {
		k.buf = append(k.buf, 0, 0, 0, 0) // length placeholder
	}
	k.buf = append(k.buf, tag)
	k.buf = append(k.buf, name...)
	k.buf = append(k.buf, 0)
}

// String appends a string element.
func (k *ReplicaKey) String(name, v string) {
	k.head(bsonString, name)
	k.buf = binary.LittleEndian.AppendUint32(k.buf, uint32(len(v)+1))
	k.buf = append(k.buf, v...)
	k.buf = append(k.buf, 0)
}

// Int64 appends a 64-bit integer element.
func (k *ReplicaKey) Int64(name string, v int64) {
	k.head(bsonInt64, name)
	k.buf = binary.LittleEndian.AppendUint64(k.buf, uint64(v))
}

// Double appends a double element.
func (k *ReplicaKey) Double(name string, v float64) {
	k.head(bsonDouble, name)
	k.buf = binary.LittleEndian.AppendUint64(k.buf, math.Float64bits(v))
}

// Null appends a null element.
func (k *ReplicaKey) Null(name string) { k.head(bsonNull, name) }

// Binary appends a generic (subtype 0) binary element.
func (k *ReplicaKey) Binary(name string, v []byte) {
	k.head(bsonBinary, name)
	k.buf = binary.LittleEndian.AppendUint32(k.buf, uint32(len(v)))
	k.buf = append(k.buf, 0)
	k.buf = append(k.buf, v...)
}

// Document returns the finished BSON document. The returned slice aliases
// the key's buffer and is valid until the next Reset or append.
func (k *ReplicaKey) Document() []byte {
	if len(k.buf) == 0 {
		k.buf = append(k.buf, 0, 0, 0, 0)
	}
	// Terminate, patch the length, then drop the terminator again so more
	// elements can still be appended.
	k.buf = append(k.buf, 0)
	binary.LittleEndian.PutUint32(k.buf[:4], uint32(len(k.buf)))
	doc := k.buf
	k.buf = k.buf[:len(k.buf)-1]
	return doc
}

// UUID returns the replica id: UUIDv5 of the document in ReplicaNamespace.
// It does not allocate.
func (k *ReplicaKey) UUID() uuid.UUID { return ReplicaID(k.Document()) }

// ReplicaID returns UUIDv5(ReplicaNamespace, doc) for an already encoded
// BSON document. It is equivalent to uuid.NewSHA1 but does not allocate.
func ReplicaID(doc []byte) uuid.UUID {
	var s [sha1.Size]byte
	if len(doc)+16 <= stackLimit {
		var buf [stackLimit]byte
		b := append(buf[:0], ReplicaNamespace[:]...)
		b = append(b, doc...)
		s = sha1.Sum(b)
	} else {
		h := sha1.New()
		_, _ = h.Write(ReplicaNamespace[:])
		_, _ = h.Write(doc)
		h.Sum(s[:0])
	}
	var u uuid.UUID
	copy(u[:], s[:16])
	u[6] = (u[6] & 0x0f) | 0x50 // version 5
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant
	return u
}

// Subkey returns "<sourceTableID>/<replica id>", the key PowerSync hashes
// for REMOVE ops and sends as op subkey.
func Subkey(sourceTableID string, replicaID uuid.UUID) string {
	return string(AppendSubkey(make([]byte, 0, len(sourceTableID)+37), sourceTableID, replicaID))
}

// AppendSubkey appends Subkey(sourceTableID, replicaID) to dst, for callers
// that build subkeys into a reusable buffer.
func AppendSubkey(dst []byte, sourceTableID string, replicaID uuid.UUID) []byte {
	dst = append(dst, sourceTableID...)
	dst = append(dst, '/')
	var s [36]byte
	encodeUUID(s[:], replicaID)
	return append(dst, s[:]...)
}

func encodeUUID(dst []byte, u uuid.UUID) {
	const hexd = "0123456789abcdef"
	j := 0
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j] = hexd[b>>4]
		dst[j+1] = hexd[b&15]
		j += 2
	}
}
