package stages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/syncpipe/syncpipe/model"
)

// RowDataMinBytes is the estimated row size from which a Change carries the
// row's TOASTable values as RowData.
//
// PostgreSQL moves values out of line only when a heap tuple exceeds
// TOAST_TUPLE_THRESHOLD (about 2 kB), and only out-of-line values are
// omitted from an UPDATE that leaves them unchanged. The estimate sums the
// decoded values, which can be smaller than their on-disk form (jsonb,
// arrays of small numbers, alignment), so the bar sits well below 2 kB:
// small rows — the common case — store nothing, and a value missed by the
// estimate is still recovered by the stream's re-read fallback.
const RowDataMinBytes = 400

// rowDataVersion leads every encoded RowData, so the format can change.
const rowDataVersion = 1

// RowDataFor returns the RowData a Change of row carries (see
// Change.RowData): the encoded TOASTable values of a big row of a table
// with TOASTable columns, else nil.
func RowDataFor(spec *TableSpec, row []model.Value) []byte {
	if len(spec.Toast) == 0 || estimateSize(row) < RowDataMinBytes {
		return nil
	}
	return AppendRowData(nil, spec, row)
}

// estimateSize approximates a row's stored size from its decoded values.
func estimateSize(row []model.Value) int {
	n := 24 // tuple header
	for _, v := range row {
		switch v.Kind() {
		case model.KindText:
			n += len(v.Str()) + 4
		case model.KindBlob:
			n += len(v.Bytes()) + 4
		case model.KindNull:
		default:
			n += 8
		}
	}
	return n
}

// AppendRowData appends the encoding of row's non-NULL TOASTable values
// (spec.Toast) to dst: a version byte, then per value the column name, the
// value's kind and its payload. Names rather than positions keep stored
// data meaningful across column reorderings.
func AppendRowData(dst []byte, spec *TableSpec, row []model.Value) []byte {
	dst = append(dst, rowDataVersion)
	for _, i := range spec.Toast {
		v := row[i]
		if v.IsNull() {
			continue
		}
		name := spec.Columns[i]
		dst = binary.AppendUvarint(dst, uint64(len(name)))
		dst = append(dst, name...)
		dst = append(dst, byte(v.Kind()))
		switch v.Kind() {
		case model.KindInteger:
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v.Int64()))
		case model.KindReal:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.Float64()))
		case model.KindText:
			dst = binary.AppendUvarint(dst, uint64(len(v.Str())))
			dst = append(dst, v.Str()...)
		case model.KindBlob:
			dst = binary.AppendUvarint(dst, uint64(len(v.Bytes())))
			dst = append(dst, v.Bytes()...)
		}
	}
	return dst
}

var errRowData = errors.New("malformed stored row data")

// MergeRowData fills row[i] for every column index i in missing from
// stored row data (written by AppendRowData for spec's table). It reports
// whether every missing column was found; the found ones are filled either
// way. The filled values copy their bytes out of data.
func MergeRowData(spec *TableSpec, data []byte, row []model.Value, missing []int) (bool, error) {
	if len(data) == 0 {
		return len(missing) == 0, nil
	}
	if data[0] != rowDataVersion {
		return false, fmt.Errorf("%w: version %d", errRowData, data[0])
	}
	found := 0
	p := data[1:]
	for len(p) > 0 {
		n, k := binary.Uvarint(p)
		if k <= 0 || n >= uint64(len(p)-k) { // name and kind byte must fit
			return false, errRowData
		}
		name := p[k : k+int(n)]
		kind := model.Kind(p[k+int(n)])
		p = p[k+int(n)+1:]
		var v model.Value
		switch kind {
		case model.KindInteger, model.KindReal:
			if len(p) < 8 {
				return false, errRowData
			}
			bits := binary.LittleEndian.Uint64(p)
			p = p[8:]
			if kind == model.KindInteger {
				v = model.Int(int64(bits))
			} else {
				v = model.Real(math.Float64frombits(bits))
			}
		case model.KindText, model.KindBlob:
			l, k := binary.Uvarint(p)
			if k <= 0 || uint64(len(p)-k) < l {
				return false, errRowData
			}
			payload := p[k : k+int(l)]
			p = p[k+int(l):]
			if kind == model.KindText {
				v = model.Text(string(payload))
			} else {
				v = model.Blob(append([]byte(nil), payload...))
			}
		default:
			return false, fmt.Errorf("%w: kind %d", errRowData, kind)
		}
		for _, i := range missing {
			if spec.Columns[i] == string(name) {
				row[i] = v
				found++
			}
		}
	}
	return found == len(missing), nil
}
