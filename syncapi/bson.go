package syncapi

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncpipe/syncpipe/sinks/bucketstore"
	"github.com/syncpipe/syncpipe/stages/syncrules"
)

// BSON sync lines (application/vnd.powersync.bson-stream): each line is
// one BSON document, the same fields as the NDJSON line, concatenated
// without separators. Lines are appended straight into the stream's
// buffers here, as the NDJSON ones are, rather than built as values and
// marshalled: a data line grows op by op while storage rows are read, so
// that the read's connection goes back before anything is sent, and the
// BSON library's public API marshals whole values only (its append-level
// package, x/bsonx/bsoncore, is documented as internal and unstable).
// The seven element types used are those of BSON spec 1.1; the tests
// decode every line kind with the library (go.mongodb.org/mongo-driver
// bson) and compare it with the NDJSON line.

// BSON element types used by sync lines.
const (
	bsonString   byte = 0x02
	bsonDocument byte = 0x03
	bsonArray    byte = 0x04
	bsonBool     byte = 0x08
	bsonNull     byte = 0x0a
	bsonInt32    byte = 0x10
	bsonInt64    byte = 0x12
)

// bsonOpen starts a document (its length is patched by bsonClose) and
// returns where it starts.
func bsonOpen(b []byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0), len(b)
}

// bsonClose ends the document or array started at start.
func bsonClose(b []byte, start int) []byte {
	b = append(b, 0)
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// bsonKey appends an element header: its type and key (a cstring: keys
// here are constants or array indexes, never holding a NUL).
func bsonKey(b []byte, t byte, key string) []byte {
	b = append(b, t)
	b = append(b, key...)
	return append(b, 0)
}

// bsonIndexKey appends the header of array element i (keys "0", "1", …).
func bsonIndexKey(b []byte, t byte, i int) []byte {
	b = append(b, t)
	b = strconv.AppendInt(b, int64(i), 10)
	return append(b, 0)
}

// bsonOpenDoc appends an embedded document element and returns where its
// body starts (for bsonClose).
func bsonOpenDoc(b []byte, t byte, key string) ([]byte, int) {
	return bsonOpen(bsonKey(b, t, key))
}

// bsonStr appends a string value: length (with the NUL), bytes, NUL.
// Invalid UTF-8 becomes U+FFFD, as in the NDJSON lines.
func bsonStr[S string | []byte](b []byte, s S) []byte {
	if !validUTF8(s) {
		return bsonStr(b, strings.ToValidUTF8(string(s), "\uFFFD"))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)+1))
	b = append(b, s...)
	return append(b, 0)
}

// bsonStringElem appends a string element.
func bsonStringElem[S string | []byte](b []byte, key string, s S) []byte {
	return bsonStr(bsonKey(b, bsonString, key), s)
}

// bsonStringOrNull appends a string element, or null for "".
func bsonStringOrNull(b []byte, key, s string) []byte {
	if s == "" {
		return bsonKey(b, bsonNull, key)
	}
	return bsonStringElem(b, key, s)
}

// bsonOpID appends an op id as the protocol wants it: a decimal string.
func bsonOpID(b []byte, key string, id int64) []byte {
	var digits [20]byte
	return bsonStringElem(b, key, strconv.AppendInt(digits[:0], id, 10))
}

func bsonInt32Elem(b []byte, key string, v int32) []byte {
	return binary.LittleEndian.AppendUint32(bsonKey(b, bsonInt32, key), uint32(v))
}

func bsonInt64Elem(b []byte, key string, v int64) []byte {
	return binary.LittleEndian.AppendUint64(bsonKey(b, bsonInt64, key), uint64(v))
}

func bsonBoolElem(b []byte, key string, v bool) []byte {
	b = bsonKey(b, bsonBool, key)
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// appendBSONCheckpoint appends a checkpoint or checkpoint_diff document
// (see lineWriter.checkpoint).
func appendBSONCheckpoint(b []byte, diff bool, lastOpID, writeCheckpoint int64, buckets []bucketEntry, removed []string, streams *streamsInfo) []byte {
	b, doc := bsonOpen(b)
	key, list := "checkpoint", "buckets"
	if diff {
		key, list = "checkpoint_diff", "updated_buckets"
	}
	b, in := bsonOpenDoc(b, bsonDocument, key)
	b = bsonOpID(b, "last_op_id", lastOpID)
	if writeCheckpoint > 0 {
		b = bsonOpID(b, "write_checkpoint", writeCheckpoint)
	}
	b, arr := bsonOpenDoc(b, bsonArray, list)
	for i, e := range buckets {
		var el int
		b, el = bsonOpen(bsonIndexKey(b, bsonDocument, i))
		b = bsonStringElem(b, "bucket", e.name)
		// Bucket checksums are signed 32-bit, as PowerSync sends them.
		b = bsonInt32Elem(b, "checksum", int32(e.checksum))
		b = bsonInt64Elem(b, "count", e.count)
		b = bsonInt32Elem(b, "priority", int32(e.priority))
		if streams != nil {
			b = appendBSONReasons(b, e.reasons, streams)
		}
		b = bsonClose(b, el)
	}
	b = bsonClose(b, arr)
	if streams != nil && !diff {
		b = appendBSONStreams(b, streams)
	}
	if diff {
		b, arr = bsonOpenDoc(b, bsonArray, "removed_buckets")
		for i, name := range removed {
			b = bsonStr(bsonIndexKey(b, bsonString, i), name)
		}
		b = bsonClose(b, arr)
	}
	return bsonClose(bsonClose(b, in), doc)
}

// appendBSONReasons appends a bucket's "subscriptions" (see appendStreams).
func appendBSONReasons(b []byte, reasons []syncrules.StreamReason, si *streamsInfo) []byte {
	b, arr := bsonOpenDoc(b, bsonArray, "subscriptions")
	for j, r := range reasons {
		var el int
		b, el = bsonOpen(bsonIndexKey(b, bsonDocument, j))
		if r.Subscription < 0 {
			b = bsonInt32Elem(b, "default", int32(si.index[r.Stream]))
		} else {
			b = bsonInt32Elem(b, "sub", int32(r.Subscription))
		}
		b = bsonClose(b, el)
	}
	return bsonClose(b, arr)
}

// appendBSONStreams appends a full checkpoint's "streams" (see
// appendStreams).
func appendBSONStreams(b []byte, si *streamsInfo) []byte {
	b, arr := bsonOpenDoc(b, bsonArray, "streams")
	for i, st := range si.states {
		var el int
		b, el = bsonOpen(bsonIndexKey(b, bsonDocument, i))
		b = bsonStringElem(b, "name", st.Name)
		b = bsonBoolElem(b, "is_default", st.Default)
		var errs int
		b, errs = bsonOpenDoc(b, bsonArray, "errors")
		n := 0
		for _, e := range si.errs {
			if e.Stream != st.Name {
				continue
			}
			var ee int
			b, ee = bsonOpen(bsonIndexKey(b, bsonDocument, n))
			n++
			if e.Subscription < 0 {
				b = bsonStringElem(b, "subscription", "default")
			} else {
				b = bsonInt32Elem(b, "subscription", int32(e.Subscription))
			}
			b = bsonStringElem(b, "message", e.Message)
			b = bsonClose(b, ee)
		}
		b = bsonClose(b, errs)
		b = bsonClose(b, el)
	}
	return bsonClose(b, arr)
}

// appendBSONOp appends op i of a data line's ops array: the fields of
// appendOp, with the row's data as a JSON string (what the Rust client
// reads from a BSON line; there is no nested form to ask for) and the
// checksum as an int64 (BSON has no unsigned 32-bit integer).
func appendBSONOp(b []byte, i int, row *bucketstore.OpRow) []byte {
	b, el := bsonOpen(bsonIndexKey(b, bsonDocument, i))
	b = bsonOpID(b, "op_id", row.OpID)
	if int(row.Op) < len(opNames) && opNames[row.Op] != "" {
		b = bsonStringElem(b, "op", opNames[row.Op])
	} else {
		b = bsonStringElem(b, "op", strconv.Itoa(int(row.Op)))
	}
	b = bsonStringOrNull(b, "object_type", row.ObjectType)
	b = bsonStringOrNull(b, "object_id", row.ObjectID)
	b = bsonStringOrNull(b, "subkey", row.Subkey)
	if row.Data == nil {
		b = bsonKey(b, bsonNull, "data")
	} else {
		b = bsonStringElem(b, "data", row.Data)
	}
	b = bsonInt64Elem(b, "checksum", int64(row.Checksum))
	return bsonClose(b, el)
}

// validUTF8 reports whether s is valid UTF-8, without converting it.
func validUTF8[S string | []byte](s S) bool {
	switch v := any(s).(type) {
	case string:
		return utf8.ValidString(v)
	case []byte:
		return utf8.Valid(v)
	}
	return false
}
