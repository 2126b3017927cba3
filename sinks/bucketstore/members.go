package bucketstore

import (
	"encoding/binary"
	"fmt"

	"github.com/syncpipe/syncpipe/model"
)

// A current row's memberships (current_data2.buckets and
// current_data3.buckets) are one bytea, packed by appendMembers in one of
// two forms, the layout's (layout.compactMembers).
//
// Version 2:
//
//	uvarint n; n × uvarint bucket id;
//	then, when n > 0, one byte: membersShared, and one object reference
//	that every membership has, or membersEach, and n object references;
//	object reference: uvarint 0 when the object type is the source
//	table's name, else uvarint len+1 and the object type; then objUUID
//	and the object id's 16 bytes, or objText, uvarint len, the object id.
//
// Version 3 (compact):
//
//	one header byte: the mode in its top two bits, n in its low six
//	(63: n follows as a uvarint, and is ≥ 63); n × uvarint bucket id;
//	then, by mode: packTableUUID, every membership's object has the
//	table's name as its type and a UUID id, its 16 bytes; packShared,
//	one object reference (as version 2's) that every membership has;
//	packEach, n object references. n = 0 is the one byte 0.
//
// A row's memberships nearly always share their object (one output table
// of the rules, its id column), so the type and id are stored once; a
// row's object id is most often a UUID, stored as its 16 bytes, and its
// object type the name of its table (then left out: 1M todos rows of 72
// bytes instead of 80, after alignment). A
// bytea[] of (id, "type\x1fid") elements took 24 bytes of array header, 4
// per element and 8 per id besides the repeated text. Version 3 folds
// four of version 2's bytes into its header byte: the count, the
// shared/each byte and a table-typed UUID object's two tags (type 0,
// objUUID). A todo's memberships (one bucket id of two bytes) take 19
// bytes instead of 22, and with its varlena header current_data3's tuple
// 72 bytes instead of 80 after alignment. Its other modes carry version
// 2's ids and object references after a header of one byte where version
// 2 spends two (count and mode; from 63 memberships on, the same bytes as
// version 2's), so no row packs larger than in version 2.
const (
	membersShared = 0
	membersEach   = 1

	objText = 0
	objUUID = 1

	// Version 3's modes, the header byte's top two bits (3 is malformed).
	packTableUUID = 0 << 6
	packShared    = 1 << 6
	packEach      = 2 << 6
	packModeMask  = 3 << 6
	// packCountEsc in the header's low six bits: a uvarint n follows.
	packCountEsc = 63
)

// appendMembers appends the packed memberships of puts of a row of table
// (its name), their bucket ids taken from ids: version 3's form when
// compact is set, else version 2's.
func appendMembers(b []byte, compact bool, puts []model.Put, table string, ids map[string]int64) []byte {
	if compact {
		return appendMembersV3(b, puts, table, ids)
	}
	b = binary.AppendUvarint(b, uint64(len(puts)))
	if len(puts) == 0 {
		return b
	}
	shared := true
	for i := range puts {
		b = binary.AppendUvarint(b, uint64(ids[puts[i].Bucket]))
		if puts[i].ObjectType != puts[0].ObjectType || puts[i].ObjectID != puts[0].ObjectID {
			shared = false
		}
	}
	if shared {
		b = append(b, membersShared)
		return appendObject(b, table, puts[0].ObjectType, puts[0].ObjectID)
	}
	b = append(b, membersEach)
	for i := range puts {
		b = appendObject(b, table, puts[i].ObjectType, puts[i].ObjectID)
	}
	return b
}

// appendMembersV3 is appendMembers in version 3's form.
func appendMembersV3(b []byte, puts []model.Put, table string, ids map[string]int64) []byte {
	n := len(puts)
	mode := byte(packTableUUID)
	var u [16]byte
	if n > 0 {
		mode = packShared
		for i := 1; i < n; i++ {
			if puts[i].ObjectType != puts[0].ObjectType || puts[i].ObjectID != puts[0].ObjectID {
				mode = packEach
				break
			}
		}
		if mode == packShared && table != "" && puts[0].ObjectType == table {
			var ok bool
			if u, ok = parseUUID(puts[0].ObjectID); ok {
				mode = packTableUUID
			}
		}
	}
	if n < packCountEsc {
		b = append(b, mode|byte(n))
	} else {
		b = append(b, mode|packCountEsc)
		b = binary.AppendUvarint(b, uint64(n))
	}
	for i := range puts {
		b = binary.AppendUvarint(b, uint64(ids[puts[i].Bucket]))
	}
	switch {
	case n == 0:
	case mode == packTableUUID:
		b = append(b, u[:]...)
	case mode == packShared:
		b = appendObject(b, table, puts[0].ObjectType, puts[0].ObjectID)
	default:
		for i := range puts {
			b = appendObject(b, table, puts[i].ObjectType, puts[i].ObjectID)
		}
	}
	return b
}

func appendObject(b []byte, table, objectType, objectID string) []byte {
	if table != "" && objectType == table {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(objectType))+1)
		b = append(b, objectType...)
	}
	if u, ok := parseUUID(objectID); ok {
		b = append(b, objUUID)
		return append(b, u[:]...)
	}
	b = append(b, objText)
	b = binary.AppendUvarint(b, uint64(len(objectID)))
	return append(b, objectID...)
}

// member is one membership of packed memberships: bucket id, object type
// and object id, spans of the packed bytes (id is the 16 bytes of a UUID
// when uuid is set, else the text; the type is the row's table's name
// when tableType is set).
type member struct {
	bucket    int64
	typ, id   []byte
	uuid      bool
	tableType bool
}

// objectType returns m's object type; table is the name of the row's
// table.
func (m *member) objectType(table string) string {
	if m.tableType {
		return table
	}
	return string(m.typ)
}

// sameObject reports whether m's object, of a row of table (its name), is
// (objectType, objectID), without allocating.
func (m *member) sameObject(table, objectType, objectID string) bool {
	if m.tableType && objectType != table || !m.tableType && string(m.typ) != objectType {
		return false
	}
	if !m.uuid {
		return string(m.id) == objectID
	}
	var buf [36]byte
	return len(objectID) == 36 && string(formatUUID(buf[:0], m.id)) == objectID
}

// objectID returns m's object id as text.
func (m *member) objectID() string {
	if m.uuid {
		var buf [36]byte
		return string(formatUUID(buf[:0], m.id))
	}
	return string(m.id)
}

// countMembers is the membership count of packed memberships that
// checkMembers accepted (compact: version 3's form).
func countMembers(b []byte, compact bool) int {
	n, _, _ := membersHead(b, compact)
	return int(n)
}

// checkMembers checks that b is well-formed packed memberships (compact:
// version 3's form), so that eachMember never reads past its end.
func checkMembers(b []byte, compact bool) error {
	ok := true
	eachMember(b, compact, func(*member) bool { return true }, &ok)
	if !ok {
		return fmt.Errorf("%w: memberships of %d bytes cut short", errPreviousFormat, len(b))
	}
	return nil
}

// forMembers calls f with each membership of b, which checkMembers
// accepted, until f returns false. m is reused between calls.
func forMembers(b []byte, compact bool, f func(m *member) bool) {
	ok := true
	eachMember(b, compact, f, &ok)
}

// membersHead reads the membership count of packed memberships and, of
// version 3's (compact), the mode; p is where the bucket ids start, 0
// when the head is malformed. Version 2's mode byte follows the ids: its
// mode is 0 here.
func membersHead(b []byte, compact bool) (n uint64, mode byte, p int) {
	if !compact {
		n, p = binary.Uvarint(b)
		if p <= 0 {
			return 0, 0, 0
		}
		return n, 0, p
	}
	if len(b) == 0 {
		return 0, 0, 0
	}
	mode, n, p = b[0]&packModeMask, uint64(b[0]&^packModeMask), 1
	if n == packCountEsc {
		var l int
		n, l = binary.Uvarint(b[1:])
		if l <= 0 || n < packCountEsc {
			return 0, 0, 0
		}
		p += l
	}
	if mode == packModeMask || n == 0 && mode != packTableUUID {
		return 0, 0, 0
	}
	return n, mode, p
}

// eachMember walks b (compact: version 3's form), clearing *ok if it is
// malformed.
func eachMember(b []byte, compact bool, f func(m *member) bool, ok *bool) {
	n, mode, p := membersHead(b, compact)
	if p <= 0 || n > uint64(len(b)) {
		*ok = false
		return
	}
	if n == 0 {
		*ok = p == len(b)
		return
	}
	ids := b[p:]
	// Skip the ids to find the objects.
	q := 0
	for range n {
		_, l := binary.Uvarint(ids[q:])
		if l <= 0 {
			*ok = false
			return
		}
		q += l
	}
	objs := ids[q:]
	if !compact {
		// Version 2's mode byte, in version 3's terms.
		if len(objs) == 0 || objs[0] != membersShared && objs[0] != membersEach {
			*ok = false
			return
		}
		mode = packEach
		if objs[0] == membersShared {
			mode = packShared
		}
		objs = objs[1:]
	}
	var m member
	o := 0
	if mode == packTableUUID {
		if len(objs) != 16 {
			*ok = false
			return
		}
		m.typ, m.tableType, m.id, m.uuid = nil, true, objs, true
		o = 16
	}
	q = 0
	for i := range int(n) {
		id, l := binary.Uvarint(ids[q:])
		q += l
		if mode == packEach || i == 0 && mode == packShared {
			next, good := readObject(objs[o:], &m)
			if !good {
				*ok = false
				return
			}
			o += next
		}
		m.bucket = int64(id)
		if !f(&m) {
			return
		}
	}
	*ok = o == len(objs)
}

// readObject reads an object reference into m, returning its length.
func readObject(b []byte, m *member) (int, bool) {
	tl, p := binary.Uvarint(b)
	if p <= 0 || tl == 0 && len(b) == p {
		return 0, false
	}
	m.typ, m.tableType = nil, tl == 0
	if tl > 0 {
		tl--
		if uint64(len(b)-p) < tl+1 {
			return 0, false
		}
		m.typ = b[p : p+int(tl)]
		p += int(tl)
	}
	tag := b[p]
	p++
	switch tag {
	case objUUID:
		if len(b)-p < 16 {
			return 0, false
		}
		m.id, m.uuid = b[p:p+16], true
		return p + 16, true
	case objText:
		il, l := binary.Uvarint(b[p:])
		if l <= 0 || uint64(len(b)-p-l) < il {
			return 0, false
		}
		p += l
		m.id, m.uuid = b[p:p+int(il)], false
		return p + int(il), true
	}
	return 0, false
}

// parseUUID reads s when it is a UUID in canonical text, lowercase and
// hyphenated, the form formatUUID writes back: only such ids are stored
// as 16 bytes, so every stored id reads back byte for byte.
func parseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i--
			continue
		}
		hi, lo := unhex(s[i]), unhex(s[i+1])
		if hi > 15 || lo > 15 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
	}
	return u, true
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}

const hexDigits = "0123456789abcdef"

// formatUUID appends the canonical text of the 16 bytes u.
func formatUUID(b, u []byte) []byte {
	for i, c := range u[:16] {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}
