package stages

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/syncpipe/syncpipe/model"
)

// KeyOrder is the storage order key of a row of spec's table: KeyOrderOf
// its first replica identity column (0 for a table without one).
func KeyOrder(spec *TableSpec, row []model.Value) int32 {
	if len(spec.Identity) == 0 || spec.Identity[0] >= len(row) {
		return 0
	}
	return KeyOrderOf(row[spec.Identity[0]])
}

// KeyOrderOf maps a key value to 32 bits that keep the source's order:
// a ≤ b in the source's order gives KeyOrderOf(a) ≤ KeyOrderOf(b) as
// int32 (storage's key_order column is a signed int4). Storage keys its
// current rows by it before the replica id, which is a hash: a snapshot
// that reads a table in key order then appends to the primary key instead
// of writing to random leaves of it. It only orders, never identifies
// (the replica id does), so a kind whose order it does not keep costs
// locality, never correctness:
//   - INTEGER: exact for |v| < 2^26, then 6 bits of magnitude and the 25
//     bits after the leading one, so that any int64 key (serials past
//     2^31, snowflake ids) still spreads over the range in order, where a
//     clamp to int32 would put every big key on one value;
//   - TEXT and BLOB: the first 4 bytes, big-endian, zero-padded (the
//     exact order of bytes, so of a text key under the C collation; a
//     text UUID gets 16 bits of locality);
//   - REAL: the top 32 bits of the float64 with the sign-flip trick;
//   - anything else, NULL included: 0.
//
// It allocates nothing: it runs once per row in op build.
func KeyOrderOf(v model.Value) int32 {
	switch v.Kind() {
	case model.KindInteger:
		return intOrder(v.Int64())
	case model.KindText:
		s := v.Str()
		var b [4]byte
		copy(b[:], s)
		return unsignedOrder(binary.BigEndian.Uint32(b[:]))
	case model.KindBlob:
		var b [4]byte
		copy(b[:], v.Bytes())
		return unsignedOrder(binary.BigEndian.Uint32(b[:]))
	case model.KindReal:
		return realOrder(v.Float64())
	}
	return 0
}

// intOrder maps int64 monotonically onto int32: non-negative values onto
// [0, 2^31) by magnitude (bit length, 6 bits) and the 25 bits after the
// leading one, negative ones onto [-2^31, 0) as the mirror image.
func intOrder(n int64) int32 {
	if n < 0 {
		return -1 - magnitudeOrder(uint64(-1-n)) // -1-n ≥ 0, decreasing in n
	}
	return magnitudeOrder(uint64(n))
}

// magnitudeOrder maps [0, 2^63) monotonically onto [0, 2^31): a float-like
// encoding whose exponent is the bit length and whose 25-bit mantissa is
// the bits after the leading one (all of them below 2^26: exact there).
func magnitudeOrder(u uint64) int32 {
	const mantissa = 25
	n := bits.Len64(u) // 0 … 63
	var m uint64
	if n > mantissa+1 {
		m = (u >> (n - 1 - mantissa)) & (1<<mantissa - 1)
	} else if n > 0 {
		m = (u << (mantissa + 1 - n)) & (1<<mantissa - 1)
	}
	return int32(uint64(n)<<mantissa | m)
}

// realOrder maps a float64 monotonically onto int32: the sign-flip trick
// makes its bits sort as unsigned integers in the float's order, and the
// top 32 of them keep that order. -0 counts as 0 (they are equal keys).
func realOrder(f float64) int32 {
	if f == 0 {
		f = 0
	}
	b := math.Float64bits(f)
	if b>>63 == 1 {
		b = ^b
	} else {
		b |= 1 << 63
	}
	return unsignedOrder(uint32(b >> 32))
}

// unsignedOrder maps uint32 onto int32 in the same order.
func unsignedOrder(u uint32) int32 { return int32(u ^ 1<<31) }
