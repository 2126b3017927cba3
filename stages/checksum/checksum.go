package checksum

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
)

// stackLimit is the largest hash input assembled in a stack buffer. Larger
// inputs are streamed through a pooled hasher so that neither path
// allocates in steady state.
const stackLimit = 512

// pooledHasher keeps the digest output next to the hasher so Sum does not
// allocate.
type pooledHasher struct {
	h       hash.Hash
	out     [sha256.Size]byte
	scratch [256]byte
}

// writeChunks feeds s to the hasher through the scratch buffer, because the
// standard library's SHA-256 has no allocation-free WriteString.
func writeChunks[S ~string | ~[]byte](p *pooledHasher, s S) {
	for len(s) > 0 {
		n := copy(p.scratch[:], s)
		_, _ = p.h.Write(p.scratch[:n])
		s = s[n:]
	}
}

var hasherPool = sync.Pool{New: func() any { return &pooledHasher{h: sha256.New()} }}

// Put returns the checksum of a PUT operation: the first four bytes of
// SHA-256("put." + objectType + "." + objectID + "." + data) read as a
// little-endian uint32, as PowerSync's hashData does. It does not allocate.
func Put(objectType, objectID string, data []byte) uint32 { return put(objectType, objectID, data) }

func put[D ~string | ~[]byte](objectType, objectID string, data D) uint32 {
	n := 4 + len(objectType) + 1 + len(objectID) + 1 + len(data)
	if n <= stackLimit {
		var buf [stackLimit]byte
		b := append(buf[:0], "put."...)
		b = append(b, objectType...)
		b = append(b, '.')
		b = append(b, objectID...)
		b = append(b, '.')
		b = append(b, data...)
		sum := sha256.Sum256(b)
		return binary.LittleEndian.Uint32(sum[:4])
	}
	p := hasherPool.Get().(*pooledHasher)
	p.h.Reset()
	writeChunks(p, "put.")
	writeChunks(p, objectType)
	writeChunks(p, ".")
	writeChunks(p, objectID)
	writeChunks(p, ".")
	writeChunks(p, data)
	c := binary.LittleEndian.Uint32(p.h.Sum(p.out[:0])[:4])
	hasherPool.Put(p)
	return c
}

// Remove returns the checksum of a REMOVE operation: the first four bytes of
// SHA-256("delete." + subkey) as a little-endian uint32 (PowerSync's
// hashDelete). subkey is normally Subkey(tableID, replicaID).
func Remove(subkey string) uint32 {
	n := 7 + len(subkey)
	if n <= stackLimit {
		var buf [stackLimit]byte
		b := append(buf[:0], "delete."...)
		b = append(b, subkey...)
		sum := sha256.Sum256(b)
		return binary.LittleEndian.Uint32(sum[:4])
	}
	p := hasherPool.Get().(*pooledHasher)
	h := p.h
	h.Reset()
	writeChunks(p, "delete.")
	writeChunks(p, subkey)
	c := binary.LittleEndian.Uint32(h.Sum(p.out[:0])[:4])
	hasherPool.Put(p)
	return c
}

// Add combines two checksums the way PowerSync does (addition modulo 2^32),
// which makes bucket checksums order-independent and incrementally
// maintainable.
func Add(a, b uint32) uint32 { return a + b }

// FromInt64 folds a wider sum (for example SQL SUM(checksum) over int8) into
// a checksum by keeping its low 32 bits, as PowerSync's storage does.
func FromInt64(sum int64) uint32 { return uint32(uint64(sum)) }
