package postgres

import (
	"fmt"

	"github.com/syncpipe/syncpipe/model"
)

// The snapshot decodes binary columns inside the reader (Column.codec);
// the tests decode one value at a time, to compare the binary and the
// text decoders.

// decodeBinary converts one column value in Postgres's binary format to its
// rule value. Only the types the snapshot reads in binary are supported
// (int2, int4, int8, oid, float4, float8, bool, bytea, uuid, timestamptz);
// other columns are an error. data == nil is NULL. The result never aliases
// data.
func decodeBinary(col Column, data []byte) (model.Value, error) {
	c := col.codec()
	if !c.binaryFormat() {
		return model.Null(), fmt.Errorf("decode column %s (%s): type has no binary decoder, read it as text", col.Name, col.TypeName)
	}
	if data == nil {
		return model.Null(), nil
	}
	v, err := decodeBinaryScalar(c, data)
	if err == nil && (c == codecBytea || c == codecUUID || c == codecTimestamptz) {
		var b []byte
		var ok bool
		b, ok, err = appendBinaryBytes(nil, c, data, col.Times)
		switch {
		case err != nil || !ok:
			v = model.Null()
		case c == codecBytea:
			v = model.Blob(append([]byte{}, b...))
		default:
			v = model.Text(string(b))
		}
	}
	if err != nil {
		return model.Null(), fmt.Errorf("decode column %s (%s) from binary: %w", col.Name, col.TypeName, err)
	}
	return v, nil
}
