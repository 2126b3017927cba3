package bucketstore

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/syncpipe/syncpipe/model"
)

// copyBuf builds a PostgreSQL binary COPY stream in one reusable buffer.
// pgx's CopyFrom takes rows as []any, which boxes every value; writing the
// wire format directly keeps the per-row cost at a few appends and no
// allocations, which matters at hundreds of thousands of rows per second.
type copyBuf struct {
	buf []byte
}

var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// reset starts a new stream, keeping the buffer's capacity.
func (c *copyBuf) reset() {
	c.buf = append(c.buf[:0], copyHeader...)
}

// trim drops a buffer grown beyond limit bytes (see keptBufBytes).
func (c *copyBuf) trim(limit int) {
	if cap(c.buf) > limit {
		c.buf = nil
	}
}

// row starts a tuple of n fields.
func (c *copyBuf) row(n int) {
	c.buf = binary.BigEndian.AppendUint16(c.buf, uint16(n))
}

func (c *copyBuf) null() {
	c.buf = binary.BigEndian.AppendUint32(c.buf, math.MaxUint32) // -1
}

func (c *copyBuf) int2(v int16) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 2)
	c.buf = binary.BigEndian.AppendUint16(c.buf, uint16(v))
}

func (c *copyBuf) int4(v int32) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 4)
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(v))
}

func (c *copyBuf) int8(v int64) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 8)
	c.buf = binary.BigEndian.AppendUint64(c.buf, uint64(v))
}

func (c *copyBuf) text(s string) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(s)))
	c.buf = append(c.buf, s...)
}

// bytes writes a text or bytea value given as bytes; nil is NULL.
func (c *copyBuf) bytes(b []byte) {
	if b == nil {
		c.null()
		return
	}
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(b)))
	c.buf = append(c.buf, b...)
}

func (c *copyBuf) uuid(u [16]byte) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, 16)
	c.buf = append(c.buf, u[:]...)
}

const (
	oidText  = 25
	oidBytea = 17
)

// beginArray starts a one-dimensional array value of n elements of type
// oid (no NULL elements); append the elements with elem or elemMember and
// close it with endArray(start).
func (c *copyBuf) beginArray(oid uint32, n int) (start int) {
	start = len(c.buf)
	c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // value length, patched by endArray
	if n == 0 {
		c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // ndim 0 = empty array
		c.buf = binary.BigEndian.AppendUint32(c.buf, 0)
		c.buf = binary.BigEndian.AppendUint32(c.buf, oid)
		return start
	}
	c.buf = binary.BigEndian.AppendUint32(c.buf, 1) // ndim
	c.buf = binary.BigEndian.AppendUint32(c.buf, 0) // has no NULLs
	c.buf = binary.BigEndian.AppendUint32(c.buf, oid)
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(n))
	c.buf = binary.BigEndian.AppendUint32(c.buf, 1) // lower bound
	return start
}

func (c *copyBuf) elem(b []byte) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(b)))
	c.buf = append(c.buf, b...)
}

func (c *copyBuf) endArray(start int) {
	binary.BigEndian.PutUint32(c.buf[start:], uint32(len(c.buf)-start-4))
}

// finish appends the trailer; the stream is then complete.
func (c *copyBuf) finish() {
	c.buf = binary.BigEndian.AppendUint16(c.buf, math.MaxUint16) // -1
}

// reader returns a reader over the finished stream; it can be called more
// than once to send the same rows again.
func (c *copyBuf) reader() *bytes.Reader { return bytes.NewReader(c.buf) }

// elemMember writes a membership element "bucket\x1fobject_type\x1fobject_id".
// The unit separator cannot occur in a bucket id (JSON escapes control
// characters) or in an object type (an identifier), so splitting on its
// first two occurrences recovers the parts even if the object id has one.
func (c *copyBuf) elemMember(bucket, objectType, objectID string) {
	c.buf = binary.BigEndian.AppendUint32(c.buf, uint32(len(bucket)+len(objectType)+len(objectID)+2))
	c.buf = append(c.buf, bucket...)
	c.buf = append(c.buf, memberSep)
	c.buf = append(c.buf, objectType...)
	c.buf = append(c.buf, memberSep)
	c.buf = append(c.buf, objectID...)
}

// members writes a v2 or v3 row's memberships as one bytea
// (appendMembers; compact: v3's form).
func (c *copyBuf) members(compact bool, puts []model.Put, table string, ids map[string]int64) {
	start := len(c.buf)
	c.buf = append(c.buf, 0, 0, 0, 0)
	c.buf = appendMembers(c.buf, compact, puts, table, ids)
	binary.BigEndian.PutUint32(c.buf[start:], uint32(len(c.buf)-start-4))
}

const memberSep = '\x1f'
