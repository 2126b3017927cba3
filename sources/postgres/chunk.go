package postgres

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/syncpipe/syncpipe/model"
)

// chunkBuilder decodes the raw rows of one snapshot chunk into rule values
// with almost no per-row allocation: values live in one []Value block per
// chunk; all TEXT payloads are appended to one byte arena that becomes a
// single string when the chunk is finished, and BLOBs share one copied
// buffer. A finished chunk owns its memory; nothing is reused across chunks
// except the builder's scratch buffers.
type chunkBuilder struct {
	cols    []Column
	codecs  []codec
	elems   []codec // element codec of array columns
	binary  []bool  // result format per column, from the row description
	keyCols []int

	capRows int
	block   []model.Value // unused part of the current value block
	rows    [][]model.Value
	text    []byte
	blob    []byte
	refs    []valueRef
	bytes   int64

	keyRaw []byte // raw key values of the last row added
	keyEnd []int
}

// valueRef places an arena payload at rows[row][col].
type valueRef struct {
	row, col   int32
	start, end int
	blob       bool
}

func newChunkBuilder(cols []Column, keyCols []int) *chunkBuilder {
	b := &chunkBuilder{
		cols:    cols,
		codecs:  make([]codec, len(cols)),
		elems:   make([]codec, len(cols)),
		binary:  make([]bool, len(cols)),
		keyCols: keyCols,
		keyEnd:  make([]int, len(keyCols)),
	}
	for i, c := range cols {
		b.codecs[i] = c.codec()
		b.elems[i] = c.elemCodec()
		b.binary[i] = b.codecs[i].binaryFormat()
	}
	return b
}

// start begins a chunk of up to capRows rows.
func (b *chunkBuilder) start(capRows int) {
	b.capRows = max(capRows, 1)
	b.block = nil
	b.rows = make([][]model.Value, 0, b.capRows)
	b.text, b.blob, b.refs = b.text[:0], b.blob[:0], b.refs[:0]
	b.bytes = 0
}

// add decodes one row of raw wire values (nil = NULL) in b.binary formats.
func (b *chunkBuilder) add(raw [][]byte) error {
	n := len(b.cols)
	if len(raw) != n {
		return fmt.Errorf("row has %d values, table has %d columns", len(raw), n)
	}
	if len(b.block) < n {
		b.block = make([]model.Value, b.capRows*n)
	}
	row := b.block[:n:n]
	b.block = b.block[n:]
	ri := int32(len(b.rows))
	for i, r := range raw {
		if r == nil {
			continue
		}
		b.bytes += int64(len(r))
		if err := b.decode(ri, i, row, r); err != nil {
			col := b.cols[i]
			return fmt.Errorf("decode column %s (%s): %w", col.Name, col.TypeName, err)
		}
	}
	b.rows = append(b.rows, row)
	b.keyRaw = b.keyRaw[:0]
	for k, ci := range b.keyCols {
		b.keyRaw = append(b.keyRaw, raw[ci]...)
		b.keyEnd[k] = len(b.keyRaw)
	}
	return nil
}

func (b *chunkBuilder) decode(ri int32, i int, row []model.Value, r []byte) error {
	c := b.codecs[i]
	start := len(b.text)
	var err error
	switch {
	case b.binary[i] && c == codecBytea:
		start = len(b.blob)
		b.blob = append(b.blob, r...)
		b.refs = append(b.refs, valueRef{row: ri, col: int32(i), start: start, end: len(b.blob), blob: true})
		return nil
	case b.binary[i] && (c == codecUUID || c == codecTimestamptz):
		var ok bool
		b.text, ok, err = appendBinaryBytes(b.text, c, r, b.cols[i].Times)
		if err != nil || !ok {
			return err
		}
	case b.binary[i]:
		row[i], err = decodeBinaryScalar(c, r)
		return err
	case c == codecText:
		b.text = append(b.text, r...)
	case c == codecArray:
		out, err := appendArrayJSON(b.text, r, b.elems[i], b.cols[i].elemDelim(), b.cols[i].Times)
		if err != nil {
			return err
		}
		b.text = out
	case c == codecTimestamp || c == codecTime:
		var ok bool
		if b.text, ok = appendTemporalISO(b.text, c, r, b.cols[i].Times); !ok {
			return nil // NULL, as in PowerSync
		}
	default: // a binary-capable type delivered as text
		row[i], err = decodeText(b.cols[i], c, r)
		return err
	}
	b.refs = append(b.refs, valueRef{row: ri, col: int32(i), start: start, end: len(b.text)})
	return nil
}

// finish returns the decoded rows; the builder may then start a new chunk.
func (b *chunkBuilder) finish() [][]model.Value {
	s := string(b.text)
	var blobs []byte
	if len(b.blob) > 0 {
		blobs = bytes.Clone(b.blob)
	}
	for _, r := range b.refs {
		if r.blob {
			b.rows[r.row][r.col] = model.Blob(blobs[r.start:r.end:r.end])
		} else {
			b.rows[r.row][r.col] = model.Text(s[r.start:r.end])
		}
	}
	rows := b.rows
	b.rows, b.block = nil, nil
	limit := max(maxScratchBytes, len(rows)*scratchBytesPerRow)
	b.text, b.blob = trimScratch(b.text, limit), trimScratch(b.blob, limit)
	return rows
}

// A chunk's scratch buffer is kept for the next chunk up to
// maxScratchBytes, or scratchBytesPerRow a row of the chunk if more: a
// chunk with a huge row grows it to the row's size, which the usual chunk
// never needs, and kept it would stay that big for as long as the snapshot
// reads; a chunk of many usual rows needs megabytes too, and regrowing
// them every chunk costs CPU (bucketstore's keptBufBytes is the same rule).
const (
	maxScratchBytes    = 4 << 20
	scratchBytesPerRow = 16 << 10
)

// trimScratch returns b, or nil when it grew beyond limit bytes.
func trimScratch(b []byte, limit int) []byte {
	if cap(b) > limit {
		return nil
	}
	return b
}

// lastKey returns the key of the last row added as Postgres input text.
func (b *chunkBuilder) lastKey() []string {
	key := make([]string, len(b.keyCols))
	start := 0
	for k, ci := range b.keyCols {
		raw := b.keyRaw[start:b.keyEnd[k]]
		start = b.keyEnd[k]
		if !b.binary[ci] {
			key[k] = string(raw)
			continue
		}
		key[k] = string(appendKeyText(nil, b.codecs[ci], raw))
	}
	return key
}

// appendKeyText formats a binary key value as text that casts back to
// exactly the same value.
func appendKeyText(dst []byte, c codec, raw []byte) []byte {
	switch c {
	case codecFloat4, codecFloat8:
		var f float64
		bits := 64
		if c == codecFloat4 {
			f = float64(math.Float32frombits(binary.BigEndian.Uint32(raw)))
			bits = 32
		} else {
			f = math.Float64frombits(binary.BigEndian.Uint64(raw))
		}
		switch {
		case math.IsNaN(f):
			return append(dst, "NaN"...)
		case math.IsInf(f, 1):
			return append(dst, "Infinity"...)
		case math.IsInf(f, -1):
			return append(dst, "-Infinity"...)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, bits)
	case codecBool:
		if raw[0] != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case codecBytea:
		const hex = "0123456789abcdef"
		dst = append(dst, '\\', 'x')
		for _, x := range raw {
			dst = append(dst, hex[x>>4], hex[x&15])
		}
		return dst
	case codecUUID:
		return appendUUID(dst, raw)
	case codecTimestamptz:
		return appendTimestamptzKey(dst, int64(binary.BigEndian.Uint64(raw)))
	}
	v, _ := decodeBinaryScalar(c, raw) // integers
	return strconv.AppendInt(dst, v.Int64(), 10)
}
